// sandboxer's Solidity runner.
//   solidity-run compile <file.sol> <out.json>   compile; diagnostics on stderr, exit 1 on errors
//   solidity-run run <out.json> [Contract call()...]
//       no args: every contract's ABI and bytecode sizes;
//       else deploy Contract to an in-memory EVM and make each call in turn,
//       printing return values and events.
//   solidity-run version
'use strict';
const fs = require('fs');
const path = require('path');

function solc() { return require('/opt/solidity/node_modules/solc'); }

function compile(file, out) {
  const src = fs.readFileSync(file, 'utf8');
  const input = {
    language: 'Solidity',
    sources: { [path.basename(file)]: { content: src } },
    settings: { optimizer: { enabled: false }, outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object', 'evm.methodIdentifiers'] } } },
  };
  const res = JSON.parse(solc().compile(JSON.stringify(input)));
  let failed = false;
  for (const e of res.errors || []) {
    process.stderr.write((e.formattedMessage || e.message) + '\n');
    if (e.severity === 'error') failed = true;
  }
  if (failed) process.exit(1);
  const contracts = {};
  for (const f of Object.keys(res.contracts || {})) {
    for (const [name, c] of Object.entries(res.contracts[f])) {
      contracts[name] = { abi: c.abi, bytecode: c.evm.bytecode.object, deployed: c.evm.deployedBytecode.object, methods: c.evm.methodIdentifiers };
    }
  }
  fs.writeFileSync(out, JSON.stringify(contracts));
  process.stdout.write(`compiled ${Object.keys(contracts).length} contract(s): ${Object.keys(contracts).join(', ')}\n`);
}

function fail(msg) { process.stderr.write('solidity-run: ' + msg + '\n'); process.exit(2); }

// --- minimal ABI coding: static types (uint*, int*, bool, address, bytesN) and string/bytes results.
const WORD = 64;
function encodeArg(type, v) {
  v = v.trim();
  if (/^u?int\d*$/.test(type)) {
    let n = BigInt(v);
    if (n < 0n) n = (1n << 256n) + n;
    return n.toString(16).padStart(WORD, '0');
  }
  if (type === 'bool') return (v === 'true' ? '1' : '0').padStart(WORD, '0');
  if (type === 'address') return v.replace(/^0x/, '').toLowerCase().padStart(WORD, '0');
  if (/^bytes\d+$/.test(type)) return v.replace(/^0x/, '').padEnd(WORD, '0');
  fail(`argument type ${type} is not supported (uint, int, bool, address, bytesN are)`);
}
function decodeWord(type, hex) {
  if (/^uint\d*$/.test(type)) return BigInt('0x' + hex).toString();
  if (/^int\d*$/.test(type)) { let n = BigInt('0x' + hex); if (n >> 255n) n -= 1n << 256n; return n.toString(); }
  if (type === 'bool') return BigInt('0x' + hex) !== 0n ? 'true' : 'false';
  if (type === 'address') return '0x' + hex.slice(24);
  return '0x' + hex;
}
function decode(types, hex) {
  const out = [];
  types.forEach((t, i) => {
    const w = hex.slice(i * WORD, (i + 1) * WORD);
    if (t === 'string' || t === 'bytes') {
      const off = Number(BigInt('0x' + w)) * 2;
      const len = Number(BigInt('0x' + hex.slice(off, off + WORD)));
      const data = Buffer.from(hex.slice(off + WORD, off + WORD + len * 2), 'hex');
      out.push(t === 'string' ? JSON.stringify(data.toString('utf8')) : '0x' + data.toString('hex'));
    } else out.push(decodeWord(t, w));
  });
  return out;
}

function parseCall(s) {
  const m = /^\s*([A-Za-z_$][A-Za-z0-9_$]*)\s*\((.*)\)\s*$/.exec(s);
  if (!m) fail(`call ${JSON.stringify(s)} is not name(args), e.g. inc() or set(5)`);
  const args = m[2].trim() === '' ? [] : m[2].split(',');
  return { name: m[1], args };
}

async function run(out, argv) {
  const contracts = JSON.parse(fs.readFileSync(out, 'utf8'));
  if (argv.length === 0) {
    for (const [name, c] of Object.entries(contracts)) {
      process.stdout.write(`contract ${name}: bytecode ${c.bytecode.length / 2} bytes, deployed ${c.deployed.length / 2} bytes\n`);
      process.stdout.write(`abi: ${JSON.stringify(c.abi)}\n`);
    }
    return;
  }
  const [name, ...calls] = argv;
  const c = contracts[name];
  if (!c) fail(`no contract ${JSON.stringify(name)}; compiled: ${Object.keys(contracts).join(', ')}`);
  const { createEVM } = await import('/opt/solidity/node_modules/@ethereumjs/evm/dist/esm/index.js');
  const util = await import('/opt/solidity/node_modules/@ethereumjs/util/dist/esm/index.js');
  const { keccak256 } = require('/opt/solidity/node_modules/js-sha3');
  const evm = await createEVM();
  const caller = util.createAddressFromString('0x' + '11'.repeat(20));
  const events = {};
  for (const e of c.abi.filter((x) => x.type === 'event')) {
    const sig = `${e.name}(${e.inputs.map((i) => i.type).join(',')})`;
    events[keccak256(sig)] = e;
  }
  const deployed = await evm.runCall({ caller, data: util.hexToBytes('0x' + c.bytecode), gasLimit: 30000000n });
  if (deployed.execResult.exceptionError) fail(`deploying ${name} reverted: ${deployed.execResult.exceptionError.error}`);
  const to = deployed.createdAddress;
  process.stdout.write(`deployed ${name} at ${to.toString()}\n`);
  let failed = false;
  for (const s of calls) {
    const call = parseCall(s);
    const fn = c.abi.find((x) => x.type === 'function' && x.name === call.name && x.inputs.length === call.args.length);
    if (!fn) fail(`${name} has no function ${call.name} taking ${call.args.length} argument(s)`);
    const sig = `${fn.name}(${fn.inputs.map((i) => i.type).join(',')})`;
    const data = c.methods[sig] + fn.inputs.map((inp, i) => encodeArg(inp.type, call.args[i])).join('');
    const r = await evm.runCall({ caller, to, data: util.hexToBytes('0x' + data), gasLimit: 30000000n });
    const ret = Buffer.from(r.execResult.returnValue).toString('hex');
    if (r.execResult.exceptionError) {
      process.stdout.write(`${s} reverted: ${r.execResult.exceptionError.error}\n`);
      failed = true;
      continue;
    }
    const vals = decode(fn.outputs.map((o) => o.type), ret);
    process.stdout.write(`${s} -> ${vals.length ? vals.join(', ') : '()'} (gas ${r.execResult.executionGasUsed})\n`);
    for (const [, topics, ldata] of r.execResult.logs || []) {
      const e = events[Buffer.from(topics[0]).toString('hex')];
      if (!e) continue;
      const hex = Buffer.from(ldata).toString('hex');
      const plain = e.inputs.filter((i) => !i.indexed);
      const vals2 = decode(plain.map((i) => i.type), hex);
      let k = 0, t = 1;
      const shown = e.inputs.map((i) => `${i.name}=${i.indexed ? decodeWord(i.type, Buffer.from(topics[t++]).toString('hex')) : vals2[k++]}`);
      process.stdout.write(`  event ${e.name}(${shown.join(', ')})\n`);
    }
  }
  if (failed) process.exit(1);
}

const [cmd, ...rest] = process.argv.slice(2);
if (cmd === 'compile') compile(rest[0], rest[1]);
else if (cmd === 'run') run(rest[0], rest.slice(1)).catch((e) => fail(e && e.stack || String(e)));
else if (cmd === 'version') {
  const evmPkg = require('/opt/solidity/node_modules/@ethereumjs/evm/package.json');
  process.stdout.write(`solc ${solc().version()}, @ethereumjs/evm ${evmPkg.version}, node ${process.version}\n`);
} else fail('usage: solidity-run compile|run|version');
