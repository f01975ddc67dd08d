// The E2B smoke test: the real, unchanged `e2b` and `@e2b/code-interpreter`
// SDKs (versions pinned in package.json) against an Airlock server, through
// the variables a user sets (docs/e2b.md): E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL. It follows the smoke plan of the E2B protocol
// specification (§8) and prints each step with its timing; the first failure
// exits 1.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK). By hand:
//   E2B_API_KEY=e2b_… E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT node smoke.mjs
// (E2B_DOMAIN optional).
// SMOKE_CODE_INTERPRETER=0 leaves out the code-interpreter steps (for a
// server without the code-interpreter template).

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import { createRequire } from 'node:module'

import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  Sandbox,
  SandboxNotFoundError,
} from 'e2b'

import { Runner, env, expectReject, requestLog, waitFor } from './lib.mjs'

const cfg = env()
const r = new Runner('smoke')
const require = createRequire(import.meta.url)
for (const [pkg, want] of [['e2b', '2.51.0'], ['@e2b/code-interpreter', '2.8.0']]) {
  const got = require(`${pkg}/package.json`).version
  assert.equal(got, want, `${pkg} is ${got}; package.json pins ${want}`)
}
{
  // The code interpreter must drive the same e2b as the rest of this script.
  const its = createRequire(require.resolve('@e2b/code-interpreter'))('e2b/package.json').version
  assert.equal(its, '2.51.0', `@e2b/code-interpreter uses e2b ${its}`)
}
const tag = randomBytes(4).toString('hex')
// A metadata value with a space, '&' and '=' proves the list filter's
// triple encoding is decoded (protocol §4.2).
const metadata = { purpose: 'smoke', run: `smoke ${tag} a&b=c` }
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }
const home = '/home/user'

// listAll returns every sandbox Sandbox.list yields for opts, all pages.
async function listAll(opts) {
  const p = Sandbox.list(opts)
  const items = []
  do {
    items.push(...(await p.nextItems()))
  } while (p.hasNext)
  return items
}

// getWithHost GETs path from the server at base with the given Host header.
function getWithHost(base, host, path) {
  const u = new URL(base)
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: u.hostname, port: u.port || 80, path, headers: { Host: host } }, (res) => {
      let b = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (b += d))
      res.on('end', () => resolve({ status: res.statusCode, body: b }))
    })
    req.on('error', reject)
    req.end()
  })
}

let sbx
const createLog = requestLog()
await r.step('create with metadata (POST /v2/sandboxes)', async () => {
  sbx = r.track(await Sandbox.create({ ...createOpts, metadata, logger: createLog.logger }))
  assert.ok(sbx.sandboxId, 'sandboxId is empty')
  assert.ok(!/[.-]/.test(sbx.sandboxId), `sandbox id ${sbx.sandboxId} must not contain '.' or '-' (<port>-<id> hosts)`)
  assert.ok(sbx.sandboxDomain, 'sandboxDomain is empty')
  assert.deepEqual(createLog.requests()[0], 'POST /v2/sandboxes', `create used ${createLog.requests()}`)
  assert.equal(createLog.statuses()[0], 201, `create answered ${createLog.lines}`)
  console.log(`smoke: sandbox ${sbx.sandboxId}, domain ${sbx.sandboxDomain}`)
})

await r.step('commands.run echo', async () => {
  const res = await sbx.commands.run('echo hi')
  assert.equal(res.exitCode, 0, 'exit code')
  assert.equal(res.stdout, 'hi\n', 'stdout')
  assert.equal(res.stderr, '', 'stderr')
})

await r.step('commands.run exit 3 → CommandExitError with stderr', async () => {
  const err = await expectReject(sbx.commands.run('echo err >&2; exit 3'), CommandExitError, 'exit 3')
  assert.equal(err.exitCode, 3, 'exitCode')
  assert.equal(err.stderr, 'err\n', 'stderr')
})

await r.step('background command streams onStdout chunks in order', async () => {
  const chunks = []
  const h = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.3; done', {
    background: true,
    onStdout: (d) => chunks.push({ d, at: Date.now() }),
  })
  assert.equal(typeof h.pid, 'number', `pid ${h.pid} is not a number`)
  assert.ok(h.pid > 0, `pid ${h.pid}`)
  const res = await h.wait()
  assert.equal(res.exitCode, 0, 'exit code')
  assert.equal(res.stdout, 'line1\nline2\nline3\n', 'collected stdout')
  assert.deepEqual(chunks.map((c) => c.d), ['line1\n', 'line2\n', 'line3\n'], 'chunks (each line must arrive as its own chunk, as printed)')
  for (let i = 1; i < chunks.length; i++) {
    const gap = chunks[i].at - chunks[i - 1].at
    assert.ok(gap >= 150, `chunk ${i + 1} came ${gap} ms after chunk ${i}: output is not streamed as produced`)
  }
})

await r.step('stdin: sendStdin, closeStdin (or kill)', async () => {
  const out = []
  const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 60_000, onStdout: (d) => out.push(d) })
  await h.sendStdin('ping\n')
  await waitFor('cat echoes ping', () => out.join('') === 'ping\n', { describe: () => `stdout so far ${JSON.stringify(out.join(''))}` })
  await h.sendStdin(new TextEncoder().encode('pong\n'))
  await waitFor('cat echoes pong', () => out.join('') === 'ping\npong\n', { describe: () => `stdout so far ${JSON.stringify(out.join(''))}` })
  if (sbx.commands.supportsStdinClose) {
    await h.closeStdin()
    const res = await h.wait()
    assert.equal(res.exitCode, 0, 'cat after closeStdin')
    assert.equal(res.stdout, 'ping\npong\n', 'stdout of cat')
  } else {
    console.log('smoke: the advertised envd version has no closeStdin: killing cat')
    assert.equal(await h.kill(), true, 'kill cat')
    await expectReject(h.wait(), CommandExitError, 'wait for the killed cat')
  }
})

await r.step('pty: create, resize, input, exit', async () => {
  let out = ''
  const dec = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 60_000, onData: (d) => (out += dec.decode(d, { stream: true })) })
  assert.equal(typeof h.pid, 'number', `pty pid ${h.pid}`)
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo pty-$((6*7))\n'))
  await waitFor('the terminal answers', () => out.includes('30 100') && out.includes('pty-42'), {
    timeoutMs: 15_000,
    describe: () => `terminal output so far ${JSON.stringify(out)}`,
  })
  await sbx.pty.sendInput(h.pid, enc.encode('exit\n'))
  const res = await h.wait()
  assert.equal(res.exitCode, 0, 'exit code of the shell')
})

await r.step('files write/read/list/exists', async () => {
  const info = await sbx.files.write(`${home}/a.txt`, 'hello file')
  assert.equal(info.path, `${home}/a.txt`, 'write path')
  assert.equal(info.name, 'a.txt', 'write name')
  assert.equal(await sbx.files.read(`${home}/a.txt`), 'hello file', 'read back')
  const entries = await sbx.files.list(home)
  const a = entries.find((e) => e.name === 'a.txt')
  assert.ok(a, `list ${home} lacks a.txt: ${JSON.stringify(entries.map((e) => e.name))}`)
  assert.equal(a.type, 'file', 'type')
  assert.equal(a.path, `${home}/a.txt`, 'path')
  assert.equal(a.size, 10, 'size')
  assert.equal(await sbx.files.exists(`${home}/a.txt`), true, 'exists a.txt')
  assert.equal(await sbx.files.exists(`${home}/nope`), false, 'exists nope')
  await expectReject(sbx.files.read(`${home}/nope`), FileNotFoundError, 'read a missing file')
  // Written as the sandbox's user, as E2B's envd does: the user owns it
  // and a command of the user's can append to it.
  const own = await sbx.commands.run(`stat -c %U ${home}/a.txt && echo more >> ${home}/a.txt`)
  assert.equal(own.stdout, 'user\n', 'owner of a written file')
  assert.equal(await sbx.files.read(`${home}/a.txt`), 'hello filemore\n', 'appended by the user')
  await sbx.files.write(`${home}/a.txt`, 'hello file')
})

await r.step('files makeDir/rename/remove', async () => {
  assert.equal(await sbx.files.makeDir(`${home}/d/e`), true, 'makeDir new')
  assert.equal(await sbx.files.makeDir(`${home}/d/e`), false, 'makeDir existing')
  const moved = await sbx.files.rename(`${home}/a.txt`, `${home}/d/b.txt`)
  assert.equal(moved.path, `${home}/d/b.txt`, 'rename result path')
  assert.equal(await sbx.files.exists(`${home}/a.txt`), false, 'old name gone')
  assert.equal(await sbx.files.read(`${home}/d/b.txt`), 'hello file', 'content under the new name')
  await sbx.files.remove(`${home}/d`)
  assert.equal(await sbx.files.exists(`${home}/d`), false, 'removed dir')
})

await r.step('files.watchDir sees a file a command creates', async () => {
  await sbx.files.makeDir(`${home}/watched`)
  const events = []
  const w = await sbx.files.watchDir(`${home}/watched`, (e) => events.push(e))
  try {
    await sbx.commands.run(`echo x > ${home}/watched/by-cmd.txt`)
    await waitFor('a watch event for by-cmd.txt', () => events.some((e) => e.name === 'by-cmd.txt' && ['create', 'write'].includes(e.type)), {
      timeoutMs: 10_000,
      describe: () => `events ${JSON.stringify(events)}`,
    })
  } finally {
    await w.stop()
  }
})

await r.step('setTimeout', async () => {
  assert.equal(await sbx.setTimeout(240_000), undefined)
})

await r.step('getInfo: running, with its metadata', async () => {
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId, 'id')
  assert.equal(info.state, 'running', 'state')
  assert.equal(info.templateId, 'base', 'the template ID the SDK asked for (its default)')
  assert.deepEqual(info.metadata, metadata, 'metadata')
})

await r.step('Sandbox.list contains it; metadata filter', async () => {
  const all = await listAll()
  const mine = all.find((s) => s.sandboxId === sbx.sandboxId)
  assert.ok(mine, `list lacks ${sbx.sandboxId}: ${JSON.stringify(all.map((s) => s.sandboxId))}`)
  assert.equal(mine.state, 'running', 'listed state')
  const hit = await listAll({ query: { metadata } })
  assert.deepEqual(hit.map((s) => s.sandboxId), [sbx.sandboxId], 'list filtered by its metadata')
  const miss = await listAll({ query: { metadata: { purpose: `not-${tag}` } } })
  assert.ok(!miss.some((s) => s.sandboxId === sbx.sandboxId), 'a filter on other metadata must not list it')
})

// Work started before the pause, checked after the resume: a file, and two
// processes whose memory must survive (a sleeper, and a counter whose value
// goes on from where it was rather than starting again).
let sleeper
let counterBefore
const counter = `${home}/counter`
const readCounter = async (s) => Number((await s.files.read(counter)).trim())
await r.step('start work that must survive the pause', async () => {
  await sbx.files.write(`${home}/before-pause.txt`, `written before the pause ${tag}`)
  sleeper = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const c = await sbx.commands.run(`i=0; while true; do i=$((i+1)); echo $i > ${counter}.tmp; mv ${counter}.tmp ${counter}; sleep 0.2; done`, {
    background: true,
    timeoutMs: 0,
  })
  counterBefore = await waitFor('the counter reaches 5', async () => {
    const v = await readCounter(sbx)
    return v >= 5 ? v : 0
  })
  // The client lets go of the streams; the processes go on.
  await sleeper.disconnect()
  await c.disconnect()
  const pids = (await sbx.commands.list()).map((p) => p.pid)
  assert.ok(pids.includes(sleeper.pid), `commands.list ${JSON.stringify(pids)} lacks the sleeper ${sleeper.pid}`)
  counterBefore = await readCounter(sbx)
})

await r.step('pause → true, pause again → false', async () => {
  assert.equal(await sbx.pause(), true, 'first pause')
  assert.equal(await sbx.pause(), false, 'second pause (already paused)')
})

await r.step('paused: getInfo and list state paused', async () => {
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'getInfo state')
  const paused = await listAll({ query: { state: ['paused'] } })
  assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId && s.state === 'paused'), `paused list lacks it: ${JSON.stringify(paused)}`)
  const running = await listAll({ query: { state: ['running'] } })
  assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId), 'the running list must not contain a paused sandbox')
})

let s2
await r.step('Sandbox.connect resumes it (201)', async () => {
  const log = requestLog()
  s2 = await Sandbox.connect(sbx.sandboxId, { logger: log.logger, requestTimeoutMs: 180_000 })
  assert.equal(s2.sandboxId, sbx.sandboxId, 'connected id')
  assert.deepEqual(log.requests()[0], `POST /v2/sandboxes/${sbx.sandboxId}/connect`, `connect used ${log.requests()}`)
  assert.equal(log.statuses()[0], 201, `connect of a paused sandbox must answer 201 (resumed): ${log.lines}`)
  assert.equal((await s2.commands.run('echo back')).stdout, 'back\n', 'echo after resume')
  assert.equal((await s2.getInfo()).state, 'running', 'state after resume')
})

await r.step('after resume: the file and the processes are still there', async () => {
  assert.equal(await s2.files.read(`${home}/before-pause.txt`), `written before the pause ${tag}`, 'file written before the pause')
  const pids = (await s2.commands.list()).map((p) => p.pid)
  assert.ok(pids.includes(sleeper.pid), `commands.list after resume ${JSON.stringify(pids)} lacks the sleeper ${sleeper.pid}: processes did not survive the pause`)
  const v1 = await readCounter(s2)
  assert.ok(v1 >= counterBefore, `the counter went from ${counterBefore} to ${v1}: it restarted, its memory was lost`)
  await waitFor('the counter grows after the resume', async () => (await readCounter(s2)) > v1, { timeoutMs: 10_000 })
  assert.equal(await s2.commands.kill(sleeper.pid), true, 'kill the sleeper')
})

await r.step('Sandbox.connect to a running sandbox (200)', async () => {
  const log = requestLog()
  await Sandbox.connect(sbx.sandboxId, { logger: log.logger })
  assert.equal(log.statuses()[0], 200, `connect of a running sandbox must answer 200: ${log.lines}`)
})

await r.step('a server in the sandbox, by E2b-Sandbox-* headers and by the getHost host', async () => {
  const page = `served from ${tag}\n`
  await s2.files.write(`${home}/www/hello.txt`, page)
  await s2.commands.run(`python3 -m http.server 3000 --directory ${home}/www`, { background: true, timeoutMs: 0 })
  const headers = { 'E2b-Sandbox-Id': s2.sandboxId, 'E2b-Sandbox-Port': '3000' }
  let last = ''
  const listing = await waitFor(
    'GET / of the guest server answers 200',
    async () => {
      const res = await fetch(`${cfg.E2B_SANDBOX_URL}/`, { headers })
      last = `${res.status} ${(await res.text()).slice(0, 200)}`
      return res.status === 200 ? last : ''
    },
    { timeoutMs: 30_000, intervalMs: 300, describe: () => `last answer: ${last}` },
  )
  assert.ok(listing.includes('hello.txt'), `the directory listing lacks hello.txt: ${listing}`)
  const res = await fetch(`${cfg.E2B_SANDBOX_URL}/hello.txt`, { headers })
  assert.equal(res.status, 200, 'GET /hello.txt')
  assert.equal(await res.text(), page, 'GET /hello.txt body')
  const host = s2.getHost(3000)
  assert.equal(host, `3000-${s2.sandboxId}.${s2.sandboxDomain}`, 'getHost(3000)')
  // The host getHost names routes too (as curl -H 'Host: …' would; fetch
  // cannot set Host).
  const byHost = await getWithHost(cfg.E2B_SANDBOX_URL, host, '/hello.txt')
  assert.equal(byHost.status, 200, `GET /hello.txt with Host ${host}: ${byHost.body}`)
  assert.equal(byHost.body, page, `GET /hello.txt with Host ${host}`)
})

await r.step('isRunning → true', async () => {
  assert.equal(await s2.isRunning(), true)
})

if (process.env.SMOKE_CODE_INTERPRETER === '0') {
  console.log('smoke: SMOKE_CODE_INTERPRETER=0: the code-interpreter steps are left out')
} else {
  let ci
  await r.step('code interpreter: create (template code-interpreter-v1)', async () => {
    const log = requestLog()
    ci = r.track(await CodeSandbox.create({ ...createOpts, logger: log.logger }))
    assert.ok(ci.sandboxId, 'sandboxId')
    assert.equal(log.requests()[0], 'POST /v2/sandboxes', `create used ${log.requests()}`)
    assert.equal((await ci.getInfo()).templateId, 'code-interpreter-v1', 'the template ID the SDK asked for')
  })
  await r.step('code interpreter: state across runCode, stdout, last expression', async () => {
    const first = await ci.runCode('x = 41')
    assert.equal(first.error, undefined, `x = 41 failed: ${JSON.stringify(first.error)}`)
    const ex = await ci.runCode('print("hello"); x + 1')
    assert.equal(ex.error, undefined, `error: ${JSON.stringify(ex.error)}`)
    assert.equal(ex.text, '42', `text of ${JSON.stringify(ex.toJSON ? ex.toJSON() : ex)}`)
    assert.deepEqual(ex.logs.stdout, ['hello\n'], 'logs.stdout')
    assert.deepEqual(ex.logs.stderr, [], 'logs.stderr')
  })
  await r.step('code interpreter: an exception → execution.error', async () => {
    const ex = await ci.runCode('raise ValueError("boom")')
    assert.ok(ex.error, 'execution.error is empty')
    assert.equal(ex.error.name, 'ValueError', 'error name')
    assert.equal(ex.error.value, 'boom', 'error value')
    assert.ok(ex.error.traceback.includes('ValueError'), `traceback ${ex.error.traceback}`)
  })
  await r.step('code interpreter: a matplotlib plot → a PNG result', async () => {
    const ex = await ci.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', { timeoutMs: 120_000 })
    assert.equal(ex.error, undefined, `plot failed: ${JSON.stringify(ex.error)}`)
    const png = ex.results.find((res) => res.png)
    assert.ok(png, `no PNG among ${JSON.stringify(ex.results.map((res) => res.formats()))}`)
    const bytes = Buffer.from(png.png, 'base64')
    assert.deepEqual([...bytes.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'the png result is not a PNG')
  })
  await r.step('code interpreter: kill', async () => {
    assert.equal(await ci.kill(), true, 'kill')
  })
}

await r.step('kill → true, kill again → false', async () => {
  assert.equal(await sbx.kill(), true, 'first kill')
  assert.equal(await sbx.kill(), false, 'second kill')
})

await r.step('after kill: isRunning false, commands.run → SandboxNotFoundError', async () => {
  assert.equal(await sbx.isRunning(), false, 'isRunning')
  await expectReject(sbx.commands.run('echo'), SandboxNotFoundError, 'commands.run on a killed sandbox')
  await expectReject(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError, 'getInfo of a killed sandbox')
})

await r.step('a bad API key → AuthenticationError', async () => {
  // Well-formed (e2b_ + hex, as long as a real one) but unknown.
  const bad = `e2b_${randomBytes(cfg.E2B_API_KEY.length > 4 ? (cfg.E2B_API_KEY.length - 4) >> 1 : 20).toString('hex')}`
  await expectReject(Sandbox.create({ apiKey: bad }), AuthenticationError, 'create with an unknown key')
  await expectReject(Sandbox.list({ apiKey: bad }).nextItems(), AuthenticationError, 'list with an unknown key')
})

r.done()
