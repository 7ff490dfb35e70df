// An E2B user's script, unchanged but for E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY (the environment): create a sandbox, run a command, write and
// read a file, list, set the timeout, kill. Prints what it saw as JSON.
import { Sandbox } from 'e2b';

const out = {};
const sbx = await Sandbox.create({ timeoutMs: 120_000, envs: { GREETING: 'hello' } });
out.sandboxId = sbx.sandboxId;
const r = await sbx.commands.run('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3').catch((e) => e);
out.run = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
const ok = await sbx.commands.run('echo done');
out.ok = { stdout: ok.stdout, exitCode: ok.exitCode };
await sbx.files.write('/home/user/notes/a.txt', 'some notes\n');
out.read = await sbx.files.read('/home/user/notes/a.txt');
out.cat = (await sbx.commands.run('cat /home/user/notes/a.txt')).stdout;
out.home = (await sbx.commands.run('cd ~ && pwd -P && echo $HOME')).stdout;
// The filesystem: list, make a directory, stat, move, remove, watch.
out.list = (await sbx.files.list('/home/user/notes')).map((e) => `${e.name}:${e.type}`);
out.madeDir = await sbx.files.makeDir('/home/user/data');
out.madeAgain = await sbx.files.makeDir('/home/user/data');
const events = [];
const watcher = await sbx.files.watchDir('/home/user/data', (e) => events.push(`${e.type}:${e.name}`));
await sbx.files.write('/home/user/data/b.txt', 'b');
for (let i = 0; i < 100 && !events.some((e) => e.endsWith(':b.txt')); i++) await new Promise((r) => setTimeout(r, 100));
await watcher.stop();
out.events = events;
out.moved = (await sbx.files.rename('/home/user/data/b.txt', '/home/user/data/c.txt')).path;
out.info = await sbx.files.getInfo('/home/user/data/c.txt').then((i) => `${i.name}:${i.type}:${i.size}`);
await sbx.files.remove('/home/user/data');
out.existsAfterRemove = await sbx.files.exists('/home/user/data');
out.listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
// A background command fed through stdin, listed, then killed.
let fed = '';
const bg = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { fed += d; } });
await sbx.commands.sendStdin(bg.pid, 'ping\n');
for (let i = 0; i < 100 && !fed.includes('ping'); i++) await new Promise((r) => setTimeout(r, 100));
out.fed = fed;
out.listedPids = (await sbx.commands.list()).map((p) => p.pid);
out.bgPid = bg.pid;
out.killed = await sbx.commands.kill(bg.pid);
out.bgEnd = await bg.wait().then((r) => `exit ${r.exitCode}`, (e) => `${e.name}: exit ${e.exitCode}`);
out.afterKillPids = (await sbx.commands.list()).map((p) => p.pid);
// A terminal: typed into, resized, killed.
let screen = '';
const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += new TextDecoder().decode(d); } });
await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((6*7))\n'));
for (let i = 0; i < 100 && !screen.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 100));
out.ptyAnswered = screen.includes('pty-42');
await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'));
for (let i = 0; i < 100 && !screen.includes('30 100'); i++) await new Promise((r) => setTimeout(r, 100));
out.ptyResized = screen.includes('30 100');
out.ptyKilled = await sbx.pty.kill(term.pid);
await sbx.setTimeout(60_000);
// Paused (frozen with its processes), then resumed by connect.
out.paused = await sbx.pause();
out.pausedState = (await Sandbox.getInfo(sbx.sandboxId)).state;
const again = await Sandbox.connect(sbx.sandboxId);
out.reconnected = (await again.commands.run('cat notes/a.txt')).stdout;
if (process.env.OTHER_KEY) {
  // Another tenant's key: sees none of the first's sandboxes.
  const other = { apiKey: process.env.OTHER_KEY };
  out.otherListed = (await Sandbox.list(other).nextItems()).map((s) => s.sandboxId);
  out.otherConnect = await Sandbox.connect(sbx.sandboxId, other).then(() => 'connected', (e) => String(e));
}
await sbx.kill();
out.afterKill = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
console.log(JSON.stringify(out));
