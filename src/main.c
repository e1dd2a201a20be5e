/* main.c - the parley binary: `serve`, `run`, `bench`, ... */
#include <stdio.h>
int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    puts("parley");
    return 0;
}
