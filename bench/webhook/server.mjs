// bench/webhook/server.mjs: the peer of bench/webhook.lua, a Node.js https
// server doing what kubelua's webhook server does for one validating
// webhook: the AdmissionReview body read whole and parsed, one field of
// the object read, the response review written as JSON (no npm packages).
// Usage: node bench/webhook/server.mjs CERT_DIR PORT_FILE
import { createServer } from "node:https";
import { readFileSync, writeFileSync, renameSync } from "node:fs";

const [dir, portFile] = process.argv.slice(2);
const server = createServer({ cert: readFileSync(`${dir}/tls.crt`),
  key: readFileSync(`${dir}/tls.key`), minVersion: "TLSv1.2" }, (req, res) => {
  if (req.method !== "POST" || req.url !== "/validate") {
    res.writeHead(404, { "Content-Type": "text/plain; charset=utf-8" });
    res.end("404 page not found\n");
    return;
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let out;
    try {
      const review = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      const r = review.request;
      const allowed = r.object.metadata.name !== "";
      out = { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
        response: allowed ? { uid: r.uid, allowed: true, status: { code: 200 } }
          : { uid: r.uid, allowed: false, status: { code: 403, reason: "Forbidden",
            message: "metadata.name is empty" } } };
    } catch (e) {
      out = { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
        response: { uid: "", allowed: false, status: { code: 400, message: String(e) } } };
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(out));
  });
});
server.keepAliveTimeout = 90000;
server.listen(0, "127.0.0.1", () => {
  writeFileSync(`${portFile}.new`, `${server.address().port}\n`);
  renameSync(`${portFile}.new`, portFile);
});
