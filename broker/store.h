/* broker/store.h — where models live and how a name becomes a directory.
 *
 * mlxr's home is $MLXR_HOME, default $XDG_DATA_HOME/mlxr, default
 * ~/.local/share/mlxr. Its store holds models at <home>/models/<org>/<repo>/
 * (MLX-format directories). A model is named by:
 *   1. a path to a directory (contains '/' and exists, or starts with . or /);
 *   2. "org/repo" in the store;
 *   3. "org/repo" in the Hugging Face cache: $HF_HUB_CACHE, else
 *      $HF_HOME/hub, else ~/.cache/huggingface/hub, as
 *      models--org--repo/snapshots/<rev>/ (rev from refs/main, else the
 *      only snapshot).
 */
#ifndef MLXR_STORE_H
#define MLXR_STORE_H

#include <stddef.h>

/* Fills buf with mlxr's home directory (not created). 0 or -1 if too long. */
int store_home(char *buf, size_t len);
/* Fills buf with <home>/models. */
int store_models_dir(char *buf, size_t len);
/* Checks NAME is a safe "org/repo" (two components of [A-Za-z0-9._-],
 * neither "." nor ".." nor starting with '.'). 0 ok, -1 with err. */
int store_check_name(const char *name, char *err, size_t errlen);
/* Resolves a model name to a directory path (see above). 0 ok; -1 with a
 * message naming where it looked. */
int store_resolve(const char *name, char *dir, size_t dirlen, char *err, size_t errlen);

#endif
