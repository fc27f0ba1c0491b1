/* kt_obj.h — small Kubernetes objects for the cache tests: kt_obj_of(json)
 * parses one, kt_pod(i) is a 1.2 KB Pod, P(name, rv) is a small Pod in
 * namespace "ns", and obj_str prints an object as "name@rv". */
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

/* kt_pod(i): Pod i, about 1.2 KB, with an escaped label value, two owners, a
 * deletionTimestamp on odd i, managedFields (dropped), and a float. */
static inline kl_obj_t *kt_pod(int i) {
  char json[4096];
  snprintf(
      json, sizeof json,
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
      "\"web-%d\",\"namespace\":\"ns-%d\",\"uid\":\"%08d-1234-5678-9abc-"
      "def012345678\",\"resourceVersion\":\"%d\",\"generation\":%d,%s"
      "\"labels\":{\"app\":\"web\",\"caf\\u00e9\":\"cr\\u00e8me-%d\","
      "\"tier\":\"frontend\"},\"managedFields\":[{\"manager\":\"kubelet\"}],"
      "\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":"
      "\"ReplicaSet\",\"name\":\"web-7d9f8c6b5\",\"uid\":\"rs-%d\","
      "\"controller\":true,\"blockOwnerDeletion\":true},{\"apiVersion\":"
      "\"v1\",\"kind\":\"Node\",\"name\":\"node-%d\",\"uid\":\"n-%d\"}]},"
      "\"spec\":{\"containers\":[{\"name\":\"web\",\"image\":\"nginx:1.25\","
      "\"ports\":[{\"containerPort\":80,\"protocol\":\"TCP\"}],\"resources\":"
      "{\"requests\":{\"cpu\":\"100m\",\"memory\":\"128Mi\"},\"limits\":{"
      "\"cpu\":\"500m\",\"memory\":\"256Mi\"}},\"env\":[{\"name\":\"A\","
      "\"value\":\"1\"},{\"name\":\"B\",\"value\":\"\\\"quoted\\\"\"}],"
      "\"terminationMessagePath\":\"/dev/termination-log\"}],"
      "\"restartPolicy\":\"Always\",\"terminationGracePeriodSeconds\":30,"
      "\"nodeName\":\"node-%d\",\"tolerations\":[],\"priority\":null,"
      "\"weight\":1.5e3},\"status\":{\"phase\":\"Running\",\"conditions\":[{"
      "\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"2026-"
      "11-29T10:00:05Z\"}],\"hostIP\":\"10.0.%d.%d\",\"podIP\":\"10.244.%d."
      "%d\",\"startTime\":\"2026-11-29T10:00:00Z\",\"qosClass\":\"Burstable\""
      ",\"big\":123456789012345}}",
      i, i % 7, i, 1000 + i, i % 3,
      i % 2 ? "\"deletionTimestamp\":\"2026-11-30T00:00:00Z\"," : "", i, i,
      i % 5, i % 5, i % 5, i / 256 % 256, i % 256, i / 256 % 256, i % 256);
  return kt_obj_of(json);
}

/* "name@rv" of an object, "-" for NULL. */
static inline int obj_str(char *b, size_t cap, const kl_obj_t *o) {
  if (!o) return snprintf(b, cap, "-");
  kl_json_span_t n = kl_obj_name(o), rv = kl_obj_resource_version(o);
  return snprintf(b, cap, "%.*s@%.*s", (int)n.n, n.p, (int)rv.n, rv.p);
}

#endif
