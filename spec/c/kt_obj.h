/* kt_obj.h — small Kubernetes objects for the cache tests: kt_obj_of(json)
 * parses one, P(name, rv) is a Pod in namespace "ns", and obj_str prints an
 * object as "name@rv". */
#ifndef KT_OBJ_H
#define KT_OBJ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "object.h"

/* The object of a JSON text that must parse (else the test aborts). */
static inline kl_obj_t *kt_obj_of(const char *json) {
  char err[256];
  kl_json_value_t v;
  kl_obj_t *o = NULL;
  if (kl_json_check(json, strlen(json), &v, err, sizeof err) != KL_OK ||
      kl_obj_parse(&v, NULL, &o, err, sizeof err) != KL_OK) {
    fprintf(stderr, "kt_obj_of %.80s: %s\n", json, err);
    abort();
  }
  return o;
}

static inline kl_obj_t *P(const char *name, const char *rv) {
  char json[512];
  snprintf(json, sizeof json,
           "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
           "\"%s\",\"namespace\":\"ns\",\"resourceVersion\":\"%s\"}}",
           name, rv);
  return kt_obj_of(json);
}

/* "name@rv" of an object, "-" for NULL. */
static inline int obj_str(char *b, size_t cap, const kl_obj_t *o) {
  if (!o) return snprintf(b, cap, "-");
  kl_json_span_t n = kl_obj_name(o), rv = kl_obj_resource_version(o);
  return snprintf(b, cap, "%.*s@%.*s", (int)n.n, n.p, (int)rv.n, rv.p);
}

#endif
