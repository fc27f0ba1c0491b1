// bench/compare/client-node.mjs: @kubernetes/client-node's informer
// (makeInformer over listPodForAllNamespaces, as its README shows) against
// the simulator bench/compare.lua runs. Prints two JSON lines on stdout:
//   {"phase":"synced",...}  after the initial list is cached
//   {"phase":"done",...}    after M "update" events reached the handler
// then waits to be killed. RSS and CPU come from /proc/self, as kubelua's
// client reads them. Usage: node client-node.mjs KUBECONFIG M
import * as k8s from '@kubernetes/client-node';
import fs from 'node:fs';

const [kubeconfig, mArg] = process.argv.slice(2);
const M = Number(mArg);

function rss() {
  const s = fs.readFileSync('/proc/self/status', 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(s)[1]) * 1024;
}
function cpu() { // utime + stime, fields 14 and 15 of /proc/self/stat
  const s = fs.readFileSync('/proc/self/stat', 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}
function gc() { if (global.gc) { global.gc(); global.gc(); } }
function out(o) { process.stdout.write(JSON.stringify(o) + '\n'); }

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const api = kc.makeApiClient(k8s.CoreV1Api);

gc();
const rss0 = rss();
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
          watch_s: (t - first) / 1000, cpu_s: cpu() - cpu0 });
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
      rss_after: rss(), cpu_s: cpu() - cpu0 });
setInterval(() => {}, 1 << 30);
