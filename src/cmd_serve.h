/* cmd_serve.h - `parley serve`. */
#ifndef PL_CMD_SERVE_H
#define PL_CMD_SERVE_H

#include "src/config.h"
#include "src/options.h"

/** Run the server until SIGINT/SIGTERM. Returns the exit status: 0, 1 when
 *  it cannot listen, 2 when a model cannot be served (bad input). */
int pl_cmd_serve(pl_opts *o, const pl_config *cfg);

#endif
