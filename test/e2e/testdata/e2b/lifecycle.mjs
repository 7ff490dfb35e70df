// The E2B lifecycle beyond a script's basics, with the real SDK: metrics,
// a command's own time limit, a polled watcher (as E2B's Python SDK
// watches), the git helpers, a snapshot (created from, listed, deleted), forks (refused
// while a process runs where memory cannot be carried, then of the files),
// every sandbox killed at the end. Prints what it saw as JSON.
import { Sandbox } from 'e2b';

const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sbx = await Sandbox.create('bash', { timeoutMs: 180_000, metadata: { purpose: 'lifecycle' } });
await sbx.files.write('/home/user/app/state.txt', 'v1\n');

// Metrics: one sample of a running sandbox against its limits.
out.metrics = (await sbx.getMetrics()).map((m) => ({
  cpuCount: m.cpuCount, cpuUsedPct: m.cpuUsedPct, memUsed: m.memUsed, memTotal: m.memTotal,
  diskUsed: m.diskUsed, diskTotal: m.diskTotal, recent: Math.abs(Date.now() - m.timestamp.getTime()) < 60_000,
}));

// A command's timeoutMs bounds the command.
const t0 = Date.now();
out.timedOut = await sbx.commands.run('sleep 30', { timeoutMs: 2000 }).then(() => 'finished', (e) => e.name);
out.timeoutTookMs = Date.now() - t0;

// A polled watcher, over Connect's JSON (what the Python SDK's watch_dir calls).
const envd = async (method, body) => {
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/${method}`, {
    method: 'POST', body: JSON.stringify(body),
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
      'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken },
  });
  return { status: res.status, body: await res.json() };
};
await sbx.files.makeDir('/home/user/polled');
const created = await envd('CreateWatcher', { path: '/home/user/polled' });
const watcherId = created.body.watcherId;
await sbx.files.write('/home/user/polled/p.txt', 'p');
let polled = [];
for (let i = 0; i < 100 && !polled.some((e) => e.name === 'p.txt'); i++) {
  await sleep(100);
  polled = polled.concat((await envd('GetWatcherEvents', { watcherId })).body.events ?? []);
}
out.polled = polled.map((e) => `${e.type}:${e.name}`);
out.removedWatcher = (await envd('RemoveWatcher', { watcherId })).status;
out.pollAfterRemove = (await envd('GetWatcherEvents', { watcherId })).body.code;

// The user option: E2B's "user" is the sandbox's user; root is refused, saying why.
out.asUser = (await sbx.commands.run('id -u', { user: 'user' })).stdout;
out.asRoot = await sbx.commands.run('id -u', { user: 'root' }).then((r) => r.stdout, (e) => String(e));
out.writeAsRoot = await sbx.files.write('/home/user/r.txt', 'x', { user: 'root' }).then(() => 'written', (e) => String(e));

// The SDK's git helpers run git as commands.
await sbx.git.init('/home/user/repo');
await sbx.files.write('/home/user/repo/a.txt', 'a\n');
out.gitUntracked = (await sbx.git.status('/home/user/repo')).fileStatus.map((f) => `${f.status}:${f.name}`);
await sbx.git.add('/home/user/repo', { all: true });
await sbx.git.commit('/home/user/repo', 'first', { authorName: 'A', authorEmail: 'a@example.com' });
out.gitLog = (await sbx.commands.run('git -C /home/user/repo log --format=%s')).stdout;

// A snapshot: a new sandbox starts from it; listed by its sandbox; deleted once.
const snap = await sbx.createSnapshot();
out.snapshotId = snap.snapshotId;
out.snapshots = (await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()).map((s) => s.snapshotId);
const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 });
out.fromSnapshot = (await fromSnap.commands.run('cat app/state.txt')).stdout;
await fromSnap.kill();
out.deleted = await Sandbox.deleteSnapshot(snap.snapshotId);
out.deletedAgain = await Sandbox.deleteSnapshot(snap.snapshotId);

// Forks: refused while a process runs that would not be carried, then two
// of the files once it ended.
const bg = await sbx.commands.run('sleep 600', { background: true });
out.forkWhileRunning = await sbx.fork({ count: 1 }).then((f) => `forked ${f.length}`, (e) => String(e));
await sbx.commands.kill(bg.pid);
await bg.wait().catch(() => {});
const forks = await sbx.fork({ count: 2 });
out.forks = [];
for (const f of forks) {
  if (!(f instanceof Sandbox)) { out.forks.push(String(f)); continue; }
  out.forks.push((await f.commands.run('cat app/state.txt')).stdout);
  await f.kill();
}
await sbx.kill();
out.left = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
console.log(JSON.stringify(out));
