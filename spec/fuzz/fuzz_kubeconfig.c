/* fuzz_kubeconfig.c — the kubeconfig loader (YAML through libyaml, then
 * contexts, clusters, users, base64 data, server URLs): the input is
 * written to a temporary file given as --kubeconfig, with an empty
 * environment and no service account, and a loaded config is turned into
 * credentials (which copies and checks what it needs) and freed. Nothing
 * runs: plugins are only started by kl_kc_token and friends. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "error.h"
#include "kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *no_env(void *ud, const char *name) { return NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  if (!path[0]) {
    snprintf(path, sizeof path, "/tmp/kl-fuzz-kubeconfig-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
  }
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();

  kl_kc_opts_t opts = {.kubeconfig = path,
                       .getenv = no_env,
                       .sa_dir = "/nonexistent/kl-fuzz-sa"};
  kl_kc_config_t *cfg = NULL;
  char err[512];
  int rc = kl_kc_load(&opts, &cfg, err, sizeof err);
  if (rc == KL_OK) {
    if (!cfg || !cfg->server || !cfg->namespace) abort();
    kl_kc_creds_free(kl_kc_creds_new(cfg, NULL));
    kl_kc_config_free(cfg);
  } else if (cfg) {
    abort();
  }
  return 0;
}
