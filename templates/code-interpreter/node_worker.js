'use strict';
// The interpreter of one JavaScript or TypeScript context of the code
// interpreter (airlock-code-interpreter, server.py), run by that context's
// worker as `node node_worker.js --language javascript|typescript --msg-fd N`.
//
// It reads one JSON request a line on stdin ({code, env_vars}) and answers
// each with NDJSON messages on file descriptor N: at most one
// {type: "result", is_main_result: true, text, ...} (the value of the last
// expression, as util.inspect shows it, or the MIME bundle of an object with
// a [Symbol.for('Jupyter.display')]() method), at most one {type: "error",
// name, value, traceback}, then {type: "end_of_execution"}. Output of
// console.log and of child processes goes to its own stdout and stderr,
// which the worker reads and streams.
//
// Code runs in Node's REPL evaluator (the module repl), in the global
// context, so state persists between executions (top-level const and let
// too), top-level await works, and Node's built-in modules are globals.
// Static imports (import x from 'm', import {a} from 'm', import * as m
// from 'm', import 'm'; a "npm:" prefix is dropped) become dynamic ones.
// TypeScript is turned into JavaScript first: by Node's own type stripping
// (module.stripTypeScriptTypes, Node 22.13+) or, failing that, by the
// typescript package (Debian's node-typescript).
//
// `node node_worker.js --probe` prints {"node": version, "typescript": bool}
// and exits: what the server checks before it creates such a context.

const fs = require('fs');
const readline = require('readline');
const repl = require('repl');
const util = require('util');
const vm = require('vm');
const domain = require('domain');
const { PassThrough, Writable } = require('stream');

function arg(name) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

function typeScriptStripper() {
  const mod = require('module');
  if (typeof mod.stripTypeScriptTypes === 'function') {
    return (code) => mod.stripTypeScriptTypes(code, { mode: 'strip' });
  }
  for (const id of ['typescript', '/usr/share/nodejs/typescript', '/usr/lib/node_modules/typescript']) {
    let ts;
    try {
      ts = require(id);
    } catch {
      continue;
    }
    return (code) => ts.transpileModule(code, {
      reportDiagnostics: false,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        // Keep the code's own imports, unused or not: they run.
        preserveValueImports: true,
        isolatedModules: true,
      },
    }).outputText;
  }
  return null;
}

if (process.argv.includes('--probe')) {
  process.stdout.write(JSON.stringify({ node: process.version, typescript: typeScriptStripper() !== null }) + '\n');
  process.exit(0);
}

const language = arg('--language') || 'javascript';
const msgFd = Number(arg('--msg-fd'));
if (!Number.isInteger(msgFd) || msgFd < 3) {
  process.stderr.write('node_worker.js: --msg-fd N (N >= 3) is required\n');
  process.exit(2);
}
const stripTypes = language === 'typescript' ? typeScriptStripper() : null;
if (language === 'typescript' && stripTypes === null) {
  process.stderr.write('node_worker.js: no TypeScript support in this Node.js\n');
  process.exit(2);
}

// What user code may replace on the global object is captured first.
const stringify = JSON.stringify;
const inspect = util.inspect;
const writeSync = fs.writeSync;

function send(obj) {
  const buf = Buffer.from(stringify(obj) + '\n');
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(msgFd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

// The REPL sends what the code throws (at once, from an await, or later
// from a timer or callback) to its domain, not to eval's callback: the
// running execution's error, or written to stderr between executions. The
// REPL's own report of it (on its output) is discarded.
let current = null; // finishes the running execution
const errors = domain.create();
errors.on('error', (err) => {
  if (current) current(err);
  else process.stderr.write('Uncaught ' + inspect(err) + '\n');
});
const server = repl.start({
  prompt: '',
  input: new PassThrough(),
  output: new Writable({ write(chunk, enc, cb) { cb(); } }),
  terminal: false,
  useGlobal: true,
  ignoreUndefined: true,
  domain: errors,
});

// SIGINT: the REPL's own breakEvalOnSigint ends the process (Node 18, 20),
// so the REPL's eval is called from a script run with breakOnSigint, which
// makes a SIGINT during synchronous code throw here. One that arrives while
// the code awaits settles the execution through the process's listener.
const runKey = Symbol.for('airlock.code-interpreter.run');
const runScript = new vm.Script('globalThis[Symbol.for("airlock.code-interpreter.run")]()');
function evalInterruptible(code, cb) {
  globalThis[runKey] = () => server.eval(code, server.context, 'cell', cb);
  try {
    runScript.runInThisContext({ breakOnSigint: true });
  } finally {
    delete globalThis[runKey];
    // An interrupted eval never left the REPL's domain.
    while (process.domain) process.domain.exit();
  }
}

// import ... from 'm' -> const ... = await import('m'); one statement a line.
const importRe = /^(\s*)import\s+(?:(type\s+)?([\w$]+\s*,?\s*)?(\*\s*as\s+[\w$]+|\{[^}]*\})?\s*from\s*)?(['"])([^'"]+)\5\s*;?\s*$/;

function rewriteImports(code) {
  return code.split('\n').map((line) => {
    const m = importRe.exec(line);
    if (!m || m[2]) return m && m[2] ? '' : line;
    const [, ind, , def, rest] = m;
    const spec = stringify(m[6].replace(/^npm:/, ''));
    const parts = [];
    const tmp = '__airlock_import_' + Math.random().toString(36).slice(2);
    if (!def && !rest) return `${ind}await import(${spec});`;
    parts.push(`const ${tmp} = await import(${spec});`);
    if (def) parts.push(`const ${def.replace(/[\s,]/g, '')} = ${tmp}.default;`);
    if (rest && rest.startsWith('*')) {
      parts.push(`const ${rest.replace(/^\*\s*as\s+/, '').trim()} = ${tmp};`);
    } else if (rest) {
      const names = rest.slice(1, -1).split(',').map((s) => s.trim()).filter((s) => s && !s.startsWith('type '));
      const fields = names.map((n) => n.replace(/\s+as\s+/, ': '));
      if (fields.length) parts.push(`const { ${fields.join(', ')} } = ${tmp};`);
    }
    return ind + parts.join(' ');
  }).join('\n');
}

function display(value) {
  const fn = value !== null && (typeof value === 'object' || typeof value === 'function')
    ? value[Symbol.for('Jupyter.display')] : undefined;
  if (typeof fn === 'function') {
    const bundle = fn.call(value) || {};
    const out = {};
    const keys = {
      'text/plain': 'text', 'text/html': 'html', 'text/markdown': 'markdown', 'image/svg+xml': 'svg',
      'image/png': 'png', 'image/jpeg': 'jpeg', 'application/pdf': 'pdf', 'text/latex': 'latex',
      'application/json': 'json', 'application/javascript': 'javascript',
    };
    const extra = {};
    for (const [mime, data] of Object.entries(bundle)) {
      if (keys[mime]) out[keys[mime]] = data;
      else extra[mime] = data;
    }
    if (Object.keys(extra).length) out.extra = extra;
    if (out.text === undefined) out.text = inspect(value);
    return out;
  }
  return { text: inspect(value) };
}

// A stack without the frames of Node's REPL and of this file.
const ownFrame = /^\s+at .*(\(?node:(vm|repl|domain|internal\/)|node_worker\.js|new Promise \(<anonymous>\))/;

function errorMessage(err) {
  if (err instanceof Error || (err && typeof err === 'object' && 'stack' in err)) {
    const stack = String(err.stack || '').split('\n').filter((l) => !ownFrame.test(l)).join('\n');
    return { type: 'error', name: String(err.name || 'Error'), value: String(err.message ?? ''), traceback: stack };
  }
  return { type: 'error', name: 'Error', value: inspect(err), traceback: 'Uncaught ' + inspect(err) };
}

let interrupt = null; // rejects the running execution's wait (SIGINT)
process.on('SIGINT', () => {
  if (interrupt) interrupt();
});

function evaluate(code) {
  return new Promise((resolve) => {
    let done = false;
    const finish = (err, value) => {
      if (done) return;
      done = true;
      interrupt = null;
      current = null;
      resolve([err, value]);
    };
    current = (err) => finish(err);
    interrupt = () => {
      const e = new Error('Script execution was interrupted by `SIGINT`');
      e.name = 'KeyboardInterrupt';
      finish(e);
    };
    try {
      evalInterruptible(code, (err, value) => {
        // An incomplete input is a Recoverable wrapping its SyntaxError.
        if (err && err.constructor && err.constructor.name === 'Recoverable' && err.err) err = err.err;
        finish(err, value);
      });
    } catch (e) {
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') e.name = 'KeyboardInterrupt';
      finish(e);
    }
  });
}

async function execute(req) {
  const env = req.env_vars && typeof req.env_vars === 'object' ? req.env_vars : {};
  const saved = {};
  for (const [k, v] of Object.entries(env)) {
    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined;
    process.env[k] = String(v);
  }
  try {
    let code = String(req.code ?? '');
    if (stripTypes) code = stripTypes(code);
    code = rewriteImports(code);
    const [err, value] = await evaluate(code);
    if (err) {
      send(errorMessage(err));
    } else if (value !== undefined) {
      let msg;
      try {
        msg = display(value);
      } catch (e) {
        msg = { text: '<display failed: ' + String(e && e.message) + '>' };
      }
      send(Object.assign({ type: 'result', is_main_result: true }, msg));
    }
  } catch (e) {
    send(errorMessage(e));
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    send({ type: 'end_of_execution' });
  }
}

// Requests, one at a time; the worker sends the next only after the end.
const queue = [];
let running = false;
let closed = false; // stdin ended: exit once the queue is done
async function pump() {
  if (running) return;
  running = true;
  while (queue.length) {
    await execute(queue.shift());
  }
  running = false;
  if (closed) process.exit(0);
}
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  let req;
  try {
    req = JSON.parse(line);
  } catch {
    return;
  }
  queue.push(req);
  pump();
});
rl.on('close', () => {
  closed = true;
  if (!running) process.exit(0);
});
