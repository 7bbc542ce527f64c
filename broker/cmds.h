/* broker/cmds.h — one entry point per CLI verb: cmd_<verb>(argc, argv),
 * argv[0] is the verb. Returns the process exit status (0 ok, 1 error,
 * 2 usage). Only these and main() may print for the user. */
#ifndef MLXR_CMDS_H
#define MLXR_CMDS_H

int cmd_import(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat_render(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_upgrade(int argc, char **argv);
void upgrade_recover_at_start(char **argv); /* main() calls it first */
int cmd_pull(int argc, char **argv);
int cmd_search(int argc, char **argv);

#endif
