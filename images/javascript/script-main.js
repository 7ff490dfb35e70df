// sandboxer's runner of run_script javascript jobs: `node script-main.js [args...]`.
//
// It reads the script's source from the first $SANDBOXER_SOURCE_BYTES bytes of
// stdin, writes it to /tmp/sandboxer-script/main.js and runs it as the main
// module, as `node /tmp/sandboxer-script/main.js [args...]` would: the same
// process.argv, CommonJS or ES module by node's own detection, the rest of
// stdin left to the script. Before the script runs it exits 125 with a
// "sandboxer:" line on stderr if something is wrong.
//
// Prestarted (a warm sandbox's supervisor started it before its job, with
// SANDBOXER_PRESTART_FD set), it first waits on that descriptor for its job,
// one JSON object {"argv": [...], "env": ["K=V", ...], "cwd": "..."} followed
// by end of file, and takes the job's arguments, environment and working
// directory; end of file without a job: it exits. The supervisor hands it a job
// only when the job's command starts with this process's own and the job
// changes none of the variables node reads at start-up (NODE_*, UV_*, TZ,
// locale, ...) but NODE_PATH, which it reads again here; any other job runs as
// a new process.
//
// With SANDBOXER_DEPS_DIR set (a script with dependencies: the cache is
// mounted read-only there), it does what the driver's dependency setup does:
// it exits 125 if the cache is incomplete, and links the cache's node_modules
// beside the source (ES modules ignore NODE_PATH).
'use strict';
const fs = require('node:fs');
const Module = require('node:module');

const DIR = '/tmp/sandboxer-script';
const pause = new Int32Array(new SharedArrayBuffer(4));

function fail(msg) {
  try { fs.writeSync(2, 'sandboxer: ' + msg + '\n'); } catch {}
  process.exit(125);
}

// read returns up to max bytes of fd (Infinity: up to end of file).
function read(fd, max) {
  const chunks = [];
  let got = 0;
  while (got < max) {
    const buf = Buffer.allocUnsafe(Math.min(max - got, 1 << 16));
    let n;
    try {
      n = fs.readSync(fd, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') { Atomics.wait(pause, 0, 0, 1); continue; }
      throw e;
    }
    if (n === 0) break;
    chunks.push(buf.subarray(0, n));
    got += n;
  }
  return Buffer.concat(chunks, got);
}

const ctl = process.env.SANDBOXER_PRESTART_FD;
if (ctl !== undefined) {
  delete process.env.SANDBOXER_PRESTART_FD;
  let job;
  try {
    const fd = Number(ctl);
    const msg = read(fd, Infinity);
    fs.closeSync(fd);
    if (msg.length === 0) process.exit(0); // discarded: no job for this process
    job = JSON.parse(msg.toString());
  } catch (e) {
    fail('prestart: ' + e.message);
  }
  for (const k of Object.keys(process.env)) delete process.env[k];
  for (const kv of job.env) {
    const i = kv.indexOf('=');
    process.env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  try { process.chdir(job.cwd); } catch (e) { fail(e.message); }
  process.argv.splice(2, process.argv.length - 2, ...job.argv.slice(2));
  // HOME and NODE_PATH may differ: node read them when it started.
  if (typeof Module._initPaths === 'function') Module._initPaths();
  else if (process.env.NODE_PATH !== undefined) fail('prestart: this node cannot re-read NODE_PATH');
}

const n = Number(process.env.SANDBOXER_SOURCE_BYTES);
delete process.env.SANDBOXER_SOURCE_BYTES;
if (!Number.isSafeInteger(n) || n <= 0) fail('SANDBOXER_SOURCE_BYTES is not a byte count');
let src;
try { src = read(0, n); } catch (e) { fail('reading the source: ' + e.message); }
if (src.length !== n) fail('the source did not arrive whole');
const deps = process.env.SANDBOXER_DEPS_DIR;
delete process.env.SANDBOXER_DEPS_DIR;
const main = DIR + '/main.js';
try {
  fs.mkdirSync(DIR, { recursive: true });
  fs.writeFileSync(main, src);
} catch (e) {
  fail(e.message);
}
if (deps !== undefined) {
  if (!fs.existsSync(deps + '/.sandboxer-complete')) {
    fail('the dependency cache is incomplete: prune it (prune_dependency_caches) and run again');
  }
  try { fs.symlinkSync(deps + '/node_modules', DIR + '/node_modules'); } catch (e) { fail(e.message); }
}
process.argv[1] = main;
Module.runMain();
