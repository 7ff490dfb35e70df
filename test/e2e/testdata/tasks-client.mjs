// Drives MCP tasks end to end with the TypeScript SDK's client (its
// experimental tasks API), over stdio, as a client that speaks tasks would.
// Usage: node tasks-client.mjs SDK_DIR SANDBOXER_BIN STATE_DIR
// Prints one JSON object: what the client saw (test/e2e/tasks_test.go checks it).
import { pathToFileURL } from 'node:url';

const [sdkDir, bin, stateDir] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(`${sdkDir}/dist/esm/${p}`).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { CallToolResultSchema } = await sdk('types.js');

const client = new Client({ name: 'tasks-e2e', version: '1' }, { capabilities: {} });
await client.connect(new StdioClientTransport({ command: bin, args: ['serve', '--state-dir', stateDir], stderr: 'inherit' }));
const out = { capabilities: client.getServerCapabilities().tasks ?? null };
const tools = await client.listTools();
out.taskSupport = Object.fromEntries(tools.tools.filter((t) => t.execution).map((t) => [t.name, t.execution.taskSupport]));

// A task that ends by itself: created at once, working, then completed.
const t0 = Date.now();
const seen = [];
for await (const m of client.experimental.tasks.callToolStream(
  { name: 'run_command', arguments: { command: 'sleep 2; echo done' } }, CallToolResultSchema, { task: { ttl: 600000 } })) {
  if (m.type === 'taskCreated') {
    out.createdAfterMs = Date.now() - t0;
    out.taskId = m.task.taskId;
  } else if (m.type === 'taskStatus') {
    seen.push(m.task.status);
  } else if (m.type === 'result') {
    out.result = m.result;
  } else {
    out.error = String(m.error);
  }
}
out.statuses = [...new Set(seen)];

// A call of several jobs (benchmark_script) runs in the server as a task.
for await (const m of client.experimental.tasks.callToolStream(
  { name: 'benchmark_script', arguments: { language: 'python', code: 'print(1)', runs: 2 } }, CallToolResultSchema, { task: {} })) {
  if (m.type === 'taskCreated') out.benchId = m.task.taskId;
  else if (m.type === 'result') out.bench = m.result.structuredContent;
  else if (m.type === 'error') out.benchError = String(m.error);
}

// A long task, cancelled: its job ends killed.
let longId;
for await (const m of client.experimental.tasks.callToolStream(
  { name: 'run_command', arguments: { command: 'sleep 300' } }, CallToolResultSchema, { task: {} })) {
  if (m.type === 'taskCreated') {
    longId = m.task.taskId;
    break;
  }
}
out.longId = longId;
out.cancel = await client.experimental.tasks.cancelTask(longId);
const job = await client.callTool({ name: 'get_job', arguments: { job_id: longId, wait_s: 10 } });
out.longJob = job.structuredContent;
out.list = (await client.experimental.tasks.listTasks()).tasks.map((t) => `${t.taskId} ${t.status}`);
await client.close();
console.log(JSON.stringify(out));
