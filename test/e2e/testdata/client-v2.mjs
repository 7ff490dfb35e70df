// Drives sandboxer as a client of the 2026-07-28 revision would: the official
// TypeScript client v2 pinned to 2026-07-28, with the tasks extension
// (@modelcontextprotocol/ext-tasks) over the host's raw request path.
// Usage: node client-v2.mjs MODULES stdio BIN STATE_DIR POLICY_FILE
//        node client-v2.mjs MODULES http URL TOKEN OTHER_TOKEN
// The server's policy holds jobs naming egress for approval (approvals.egress).
// MODULES is the node_modules directory holding both packages (conformance/).
// Prints one JSON object: what the client saw (test/e2e/client_v2_test.go checks it).
import { pathToFileURL } from 'node:url';

const [mods, mode, target, arg2, arg3] = process.argv.slice(2);
const policyFile = mode === 'stdio' ? arg3 : undefined;
const load = (p) => import(pathToFileURL(`${mods}/@modelcontextprotocol/${p}`).href);
const { Client, StreamableHTTPClientTransport } = await load('client/dist/index.mjs');
const { StdioClientTransport } = await load('client/dist/stdio.mjs');
const { createTaskSessionFromClient, resultFromTaskOutcome } = await load('ext-tasks/dist/client/index.js');

const V = '2026-07-28';
const info = { name: 'client-v2-e2e', version: '1' };
const caps = { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: { form: {} } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (res) => (res?.content ?? []).map((c) => c.text ?? '').join('');

async function connect(token) {
  const client = new Client(info, { capabilities: caps, versionNegotiation: { mode: { pin: V } } });
  const transport = mode === 'stdio'
    ? new StdioClientTransport({ command: target, args: ['serve', '--state-dir', arg2, '--policy', policyFile], stderr: 'inherit' })
    : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  // The host's raw request path, which the tasks extension needs: requests
  // with ids of its own on the client's transport, their answers taken
  // before the client sees them.
  const pending = new Map();
  let seq = 0;
  const inner = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    if (msg.method === undefined && pending.has(msg.id)) {
      pending.get(msg.id)(msg);
      pending.delete(msg.id);
      return;
    }
    inner?.(msg, extra);
  };
  const rawDispatch = (request) => new Promise((resolve, reject) => {
    const id = `raw:${++seq}`;
    pending.set(id, resolve);
    transport.send({ jsonrpc: '2.0', id, ...request }).catch(reject);
  });
  const framing = { protocolVersion: V, clientInfo: info, clientCapabilities: caps };
  // The person, here: approves every request for approval it is shown.
  const asked = [];
  const onInputRequest = async (request, context) => {
    asked.push({ kind: request.kind, message: request.params?.message, delivery: context.delivery });
    return { action: 'accept', content: { approve: true } };
  };
  const session = createTaskSessionFromClient(client, { endpointId: `e2e-${mode}`, rawDispatch, v2RequestFraming: framing, onInputRequest });
  // A request of the new revision with its _meta, through the raw path.
  const raw = (method, params) => rawDispatch({ method, params: { ...params, _meta: {
    'io.modelcontextprotocol/protocolVersion': V, 'io.modelcontextprotocol/clientInfo': info,
    'io.modelcontextprotocol/clientCapabilities': caps } } });
  return { client, session, raw, asked };
}

const out = {};
const { client, session, raw, asked } = await connect(arg2);
out.era = client.getProtocolEra();
out.extensions = client.getServerCapabilities().extensions ?? null;

// A job that outlives wait_s becomes a task, polled to its inlined result.
{
  const ex = await session.callTool('run_command', { command: 'sleep 2; echo task-done', wait_s: 0.5 });
  const statuses = [];
  const { outcome } = await ex.settle({ onEvent: (e) => { if (e.type === 'task') statuses.push(e.task.status); } });
  out.long = { kind: ex.kind, taskId: ex.handle?.taskId, statuses: [...new Set(statuses)], status: outcome.status,
    text: textOf(resultFromTaskOutcome(outcome)) };
}
// A quick one answers as a plain call.
{
  const ex = await session.callTool('run_command', { command: 'echo quick', wait_s: 30 });
  const { outcome } = await ex.settle();
  out.quick = { kind: ex.kind, text: textOf(resultFromTaskOutcome(outcome)) };
}
// Another, cancelled: tasks/get says cancelled.
{
  const ex = await session.callTool('run_command', { command: 'sleep 300', wait_s: 0.5 });
  const taskId = ex.handle?.taskId;
  await ex.cancel();
  const got = await raw('tasks/get', { taskId });
  out.cancelled = { kind: ex.kind, taskId, status: got.result?.status, error: got.error?.message };
  // Gone in this revision: -32601 (over HTTP with status 404, which the
  // transport reports as an HTTP error carrying the JSON-RPC answer).
  try {
    out.tasksList = (await raw('tasks/list', {})).error?.code ?? null;
  } catch (e) {
    out.tasksList = JSON.parse(e.data?.text ?? '{}').error?.code ?? String(e);
    out.tasksListStatus = e.data?.status;
  }
}
// Listen to a job's output and status while it runs.
{
  const updates = [];
  client.setNotificationHandler('notifications/resources/updated', (n) => { updates.push(n.params.uri); });
  const ex = await session.callTool('run_command', { command: 'for i in 1 2 3 4; do echo line$i; sleep 0.7; done', background: true });
  const jobId = ex.handle?.taskId;
  const sub = await client.listen({ resourceSubscriptions: [`job://${jobId}/output`, `job://${jobId}`, 'job://not-a-job/output'] });
  out.listen = { kind: ex.kind, jobId, honored: sub.honoredFilter };
  await ex.settle();
  await sleep(500);
  await sub.close();
  out.listen.outputUpdates = updates.filter((u) => u === `job://${jobId}/output`).length;
  out.listen.statusUpdates = updates.filter((u) => u === `job://${jobId}`).length;
  out.listen.closed = await sub.closed;
  out.jobId = jobId;
}
// Listen to a workspace's directory and one of its files.
{
  const ws = `e2e-${mode}-${process.pid}`;
  const created = await client.callTool({ name: 'create_workspace', arguments: { name: ws } });
  if (created.isError) throw new Error(`create_workspace: ${textOf(created)}`);
  await client.callTool({ name: 'write_file', arguments: { workspace: ws, path: 'notes/a.txt', content: 'one\n' } });
  const updates = [];
  client.setNotificationHandler('notifications/resources/updated', (n) => { updates.push(n.params.uri); });
  const sub = await client.listen({ resourceSubscriptions: [`workspace://${ws}/notes`, `workspace://${ws}/notes/a.txt`, `workspace://${ws}/missing`] });
  out.files = { honored: sub.honoredFilter };
  await client.callTool({ name: 'write_file', arguments: { workspace: ws, path: 'notes/b.txt', content: 'two\n' } });
  await client.callTool({ name: 'run_command', arguments: { workspace: ws, command: 'echo more >> notes/a.txt' } });
  for (let i = 0; i < 50 && !(updates.includes(`workspace://${ws}/notes/a.txt`) && updates.includes(`workspace://${ws}/notes`)); i++) await sleep(100);
  out.files.updates = [...new Set(updates)].sort();
  await sub.close();
  await client.callTool({ name: 'delete_workspace', arguments: { name: ws } });
}
// An approval a person gives: the job names egress, which the policy holds.
// A client of the tasks extension gets the call as a task in input_required;
// the session shows the request to its person and answers with tasks/update.
{
  const ex = await session.callTool('run_command', { command: 'echo approved', egress: ['example.com'] });
  const statuses = [];
  const { outcome } = await ex.settle({ onEvent: (e) => { if (e.type === 'task') statuses.push(e.task.status); } });
  out.approval = { kind: ex.kind, statuses: [...new Set(statuses)], asked, status: outcome.status,
    text: outcome.status === 'completed' ? textOf(resultFromTaskOutcome(outcome)) : '' };
}
// Another tenant sees none of it.
if (mode === 'http') {
  const other = await connect(arg3);
  const sub = await other.client.listen({ resourceSubscriptions: [`job://${out.jobId}/output`], });
  out.other = { honored: sub.honoredFilter };
  await sub.close();
  const got = await other.raw('tasks/get', { taskId: out.long.taskId });
  out.other.taskError = got.error?.message ?? null;
  await other.session.close();
  await other.client.close();
}
await session.close();
await client.close();
console.log(JSON.stringify(out));
process.exit(0);
