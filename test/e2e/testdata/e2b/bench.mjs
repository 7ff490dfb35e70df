// The e2b SDK's side of `bench -only e2b`: RUNS times Sandbox.create() to
// the first command's output, then RUNS command round trips in one sandbox.
// Prints {"firstOutputMs": [...], "roundTripMs": [...]}.
import { Sandbox } from 'e2b';

const runs = Number(process.env.RUNS || 10);
const out = { firstOutputMs: [], roundTripMs: [] };
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create();
  let first = 0;
  await sbx.commands.run('echo hi', { onStdout: () => { if (!first) first = performance.now(); } });
  out.firstOutputMs.push((first || performance.now()) - t0);
  if (i === 0) {
    for (let j = 0; j < runs; j++) {
      const t1 = performance.now();
      await sbx.commands.run('true');
      out.roundTripMs.push(performance.now() - t1);
    }
  }
  await sbx.kill();
}
console.log(JSON.stringify(out));
