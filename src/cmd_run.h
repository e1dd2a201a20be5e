/* cmd_run.h - `parley run JOB.yaml`: run a conversation job in-process. */
#ifndef PL_CMD_RUN_H
#define PL_CMD_RUN_H

/** Run the job named in argv (argv[1] is "run"). Returns the exit status:
 *  0 when every question succeeded, 1 otherwise, 2 on usage or spec errors. */
int pl_cmd_run(int argc, char **argv);

#endif
