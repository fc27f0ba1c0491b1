// bench/compare/client-node.mjs: @kubernetes/client-node's informer
// (makeInformer over listPodForAllNamespaces, as its README shows) against
// the server bench/lib/listwatch.lua runs. Prints two JSON lines on stdout:
//   {"phase":"synced",...}  after the initial list is cached
//   {"phase":"done",...}    after M "update" events reached the handler
// then waits to be killed. RSS and CPU come from /proc/self, as kubelua's
// client reads them. Usage: node client-node.mjs KUBECONFIG M
import * as k8s from '@kubernetes/client-node';
import fs from 'node:fs';

const [kubeconfig, mArg] = process.argv.slice(2);
const M = Number(mArg);

function rss(field = 'VmRSS') { // or VmHWM, the peak
  const s = fs.readFileSync('/proc/self/status', 'utf8');
  return Number(new RegExp(field + ':\\s+(\\d+) kB').exec(s)[1]) * 1024;
}
function cpu() { // utime + stime in seconds, to the microsecond
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}
function heap() { return process.memoryUsage().heapUsed; } // the V8 heap
function gc() { if (global.gc) { global.gc(); global.gc(); } }
function out(o) { process.stdout.write(JSON.stringify(o) + '\n'); }

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const api = kc.makeApiClient(k8s.CoreV1Api);

gc();
const rss0 = rss();
const heap0 = heap();
const cpu0 = cpu();
const t0 = performance.now();
const inf = k8s.makeInformer(kc, '/api/v1/pods', () => api.listPodForAllNamespaces());
let updates = 0;
let first = 0;
let others = 0;
inf.on('update', () => {
  if (updates === 0) first = performance.now();
  updates += 1;
  if (updates === M) {
    const t = performance.now();
    out({ phase: 'done', events: updates, other_events: others,
          watch_s: (t - first) / 1000, cpu_s: cpu() - cpu0,
          at: Number(process.hrtime.bigint()) / 1e9 }); // CLOCK_MONOTONIC
  }
});
inf.on('add', () => { if (updates > 0) others += 1; });
inf.on('delete', () => { others += 1; });
inf.on('error', (err) => {
  out({ phase: 'error', error: String(err && err.message || err) });
  process.exit(1);
});
await inf.start();
const syncS = (performance.now() - t0) / 1000;
gc();
out({ phase: 'synced', sync_s: syncS, objects: inf.list().length, rss_before: rss0,
      rss_after: rss(), rss_peak: rss('VmHWM'), heap_before: heap0, heap_after: heap(),
      cpu_s: cpu() - cpu0 });
setInterval(() => {}, 1 << 30);
