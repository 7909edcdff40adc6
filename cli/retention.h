/* retention.h: `sandtrail retention`, removing old events by whole days. */
#ifndef ST_CLI_RETENTION_H
#define ST_CLI_RETENTION_H

/* Runs the command (argv[0] is "retention"); returns the exit status. */
int st_cli_retention(const char *dsn, int argc, char **argv);

#endif
