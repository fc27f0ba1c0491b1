/* fuzz_kubeconfig.c — the kubeconfig loader (YAML through libyaml, then
 * contexts, clusters, users, base64 data, server URLs, KUBECONFIG merging)
 * and the RFC 3339 reader of exec credentials. The input is written to a
 * temporary file given as --kubeconfig, with an empty environment and no
 * service account; when it holds a line "# next", the part after it goes to
 * a second file and both are loaded as KUBECONFIG=first:second. A first
 * line "# context: NAME" selects that context (--context). A loaded config
 * is turned into credentials (which copy and check what they need) and
 * freed. Nothing runs: plugins only start from kl_kc_token and friends. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char paths[2][64], kubeconfig_env[160];

static const char *env(void *ud, const char *name) {
  return ud && strcmp(name, "KUBECONFIG") == 0 ? kubeconfig_env : NULL;
}

static void put(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!paths[0][0]) {
    for (int i = 0; i < 2; i++) {
      snprintf(paths[i], sizeof paths[i], "/tmp/kl-fuzz-kubeconfig-XXXXXX");
      int fd = mkstemp(paths[i]);
      if (fd < 0) abort();
      close(fd);
    }
    snprintf(kubeconfig_env, sizeof kubeconfig_env, "%s:%s", paths[0],
             paths[1]);
  }
  double t;
  (void)kl_kc_parse_rfc3339((const char *)data, size, &t);

  char context[64] = "";
  static const char ctx[] = "# context: ";
  if (size > sizeof ctx - 1 && memcmp(data, ctx, sizeof ctx - 1) == 0) {
    size_t i = sizeof ctx - 1, k = 0;
    while (i < size && data[i] != '\n' && k < sizeof context - 1)
      context[k++] = (char)data[i++];
    context[k] = '\0';
  }
  static const char sep[] = "\n# next\n";
  const uint8_t *next = NULL;
  for (size_t i = 0; i + sizeof sep - 1 <= size && !next; i++)
    if (memcmp(data + i, sep, sizeof sep - 1) == 0) next = data + i;
  kl_kc_opts_t opts = {
      .context = context, .getenv = env, .sa_dir = "/nonexistent/kl-fuzz-sa"};
  if (next) {
    put(paths[0], data, (size_t)(next - data));
    put(paths[1], next + sizeof sep - 1,
        size - (size_t)(next - data) - (sizeof sep - 1));
    opts.getenv_ud = kubeconfig_env;
  } else {
    put(paths[0], data, size);
    opts.kubeconfig = paths[0];
  }

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
