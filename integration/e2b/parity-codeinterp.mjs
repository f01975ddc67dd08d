// Parity of the code interpreter and of the base template with E2B's, through
// the real `@e2b/code-interpreter` (2.8.0) and `e2b` SDKs: what E2B's own
// code-interpreter tests check (results as E2B formats them, matplotlib
// charts, contexts in any directory, JavaScript and TypeScript contexts,
// languages it cannot run) and E2B's base template (python, sudo for user).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK) like every parity-*.mjs.
// By hand: E2B_API_KEY=… E2B_API_URL=… E2B_SANDBOX_URL=… node parity-codeinterp.mjs

import assert from 'node:assert/strict'

import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { Sandbox } from 'e2b'

import { Runner, env } from './lib.mjs'

env()
const r = new Runner('parity-codeinterp')
const opts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }

let ci
await r.step('create a code-interpreter sandbox', async () => {
  ci = r.track(await CodeSandbox.create(opts))
})

// run runs code and fails on an execution error.
async function run(code, o = {}) {
  const ex = await ci.runCode(code, { timeoutMs: 120_000, ...o })
  assert.equal(ex.error, undefined, `${code}: ${JSON.stringify(ex.error)}`)
  return ex
}

await r.step('results: strings unquoted, text/plain of the repr, execution count', async () => {
  assert.equal((await run("'hello'")).text, 'hello')
  assert.equal((await run('"it\'s"')).text, '"it\'s"', 'double-quoted repr kept')
  assert.equal((await run("['a', 1]")).text, "['a', 1]")
  assert.equal((await run('x =1; x')).text, '1')
  assert.equal((await run('list(range(30))')).text.split('\n').length, 30, 'a long list: one item a line, as IPython')
  const ex = await run('\n    y = 6\n    y * 7\n    ')
  assert.equal(ex.text, '42', 'indented code runs')
  const a = await run('1')
  const b = await run('2')
  assert.equal(b.executionCount, a.executionCount + 1, 'execution count')
})

await r.step('results: display() and HTML, errors with name, value, traceback', async () => {
  const ex = await run("class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H()'\ndisplay(H())\nH()")
  assert.equal(ex.results.length, 2, JSON.stringify(ex.results))
  assert.equal(ex.results[0].isMainResult, false)
  assert.equal(ex.results[0].html, '<b>h</b>')
  assert.equal(ex.results[1].isMainResult, true)
  assert.equal(ex.text, 'H()')
  const bad = await ci.runCode("print('before')\n{}['k']")
  assert.deepEqual(bad.logs.stdout, ['before\n'])
  assert.equal(bad.error.name, 'KeyError')
  assert.equal(bad.error.value, "'k'")
  assert.ok(bad.error.traceback.includes("{}['k']"), bad.error.traceback)
})

await r.step('a pandas DataFrame: text, HTML and data', async () => {
  const ex = await run("import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})")
  const res = ex.results[0]
  assert.ok(res.html.includes('<table'), res.html)
  assert.deepEqual(res.data, { a: [1, 2, 3] })
})

await r.step('a matplotlib figure: PNG and chart', async () => {
  const ex = await run(`
import matplotlib.pyplot as plt
plt.figure(figsize=(10, 6))
plt.bar(['Author A', 'Author B', 'Author C'], [100, 200, 300])
plt.xlabel('Authors')
plt.ylabel('Books (k)')
plt.title('Book Sales')
plt.show()`)
  assert.equal(ex.results.length, 1)
  const res = ex.results[0]
  assert.deepEqual([...Buffer.from(res.png, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'PNG')
  assert.ok(res.text.startsWith('<Figure size 1000x600'), res.text)
  const c = res.chart
  assert.equal(c.type, 'bar')
  assert.equal(c.title, 'Book Sales')
  assert.equal(c.x_label, 'Authors')
  assert.equal(c.y_unit, 'k')
  assert.deepEqual(c.elements.map((e) => [e.label, e.value]), [['Author A', 100], ['Author B', 200], ['Author C', 300]])

  const pie = (await run("import matplotlib.pyplot as plt\nplt.pie([90, 10], labels=['No', 'Yes'])\nplt.show()")).results[0].chart
  assert.equal(pie.type, 'pie')
  assert.deepEqual(pie.elements.map((e) => [e.label, e.angle, e.radius]), [['No', 324], ['Yes', 36]].map(([l, a]) => [l, a, 1]))
  const line = (await run("import matplotlib.pyplot as plt, datetime\nplt.plot([datetime.date(2023, 9, d) for d in (1, 2, 3)], [1, 4, 9], label='sq')\nplt.show()")).results[0].chart
  assert.equal(line.type, 'line')
  assert.equal(line.x_scale, 'datetime')
  assert.deepEqual(line.elements[0].points[0], ['2023-09-01', 1])
})

await r.step('contexts: default cwd /home/user as user; cwd /root as root; a missing cwd is refused', async () => {
  const ex = await run('from pathlib import Path; import getpass; print(Path.cwd(), getpass.getuser())')
  assert.deepEqual(ex.logs.stdout, ['/home/user user\n'])
  const ctx = await ci.createCodeContext({ language: 'python', cwd: '/root' })
  assert.equal(ctx.cwd, '/root')
  assert.equal(ctx.language, 'python')
  const inRoot = await run("import os; open('f.txt', 'w').write('x'); os.getcwd()", { context: ctx })
  assert.equal(inRoot.text, '/root')
  const listed = await ci.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/root'), JSON.stringify(listed))
  await ci.removeCodeContext(ctx.id)
  await assert.rejects(ci.createCodeContext({ cwd: '/nonexistent' }), /400/)
})

await r.step('JavaScript and TypeScript contexts', async () => {
  const hello = await run('console.log("Hello World!")', { language: 'js' })
  assert.deepEqual(hello.logs.stdout, ['Hello World!\n'])
  await run('const z = 1', { language: 'js' })
  assert.equal((await run('z', { language: 'js' })).results[0].text, '1')
  const awaited = await run("async function main() { return 'Hello, World!' }\nawait main()", { language: 'js' })
  assert.equal(awaited.results[0].text, 'Hello, World!')
  assert.equal((await run('process.cwd()', { language: 'js' })).text, '/home/user')
  const ctx = await ci.createCodeContext({ cwd: '/home', language: 'js' })
  assert.equal(ctx.language, 'javascript')
  assert.equal((await run('process.cwd()', { context: ctx })).text, '/home')
  const err = await ci.runCode('notDefined', { language: 'js' })
  assert.equal(err.error.name, 'ReferenceError')
  const ts = await run('function subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)', { language: 'ts' })
  assert.equal(ts.results[0].text, '-1')
})

await r.step('other languages are refused clearly', async () => {
  const ex = await ci.runCode('getwd()', { language: 'r' })
  assert.equal(ex.error.name, 'UnsupportedLanguage')
  assert.match(ex.error.value, /not supported: this code interpreter runs python, javascript \(js\) and typescript \(ts\)/)
  await assert.rejects(ci.createCodeContext({ language: 'java' }), /501/)
})

await r.step('kill the code-interpreter sandbox', async () => {
  assert.equal(await ci.kill(), true)
})

let base
await r.step("E2B's base template: python, and sudo for user", async () => {
  base = r.track(await Sandbox.create(opts))
  const py = await base.commands.run('python --version')
  assert.match(py.stdout, /^Python 3\./)
  const who = await base.commands.run('whoami; sudo -n true && sudo -n whoami')
  assert.equal(who.stdout, 'user\nroot\n', `stderr: ${who.stderr}`)
  assert.equal(await base.kill(), true)
})

r.done()
