// Parity of envd's file surface and of a killed sandbox's errors with E2B,
// driven through the real `e2b` SDK (package.json pins it) in the URL mode
// docs/e2b.md recommends (E2B_SANDBOX_URL): what E2B's JS SDK tests
// tests/sandbox/files/{metadata,info,list,write,signing,watch}.test.ts (the
// server reports envd 0.6.4, so the SDK sends metadata, includeEntry and
// allowNetworkMounts) and
// tests/sandbox/commands/sandboxKilledDuringRun.test.ts check of envd.
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK). By hand:
//   E2B_API_KEY=e2b_… E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT node parity-files.mjs

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { FileType, Sandbox, TimeoutError } from 'e2b'

import { Runner, env, waitFor } from './lib.mjs'

env()
const r = new Runner('parity-files')
const tag = randomBytes(4).toString('hex')
const home = '/home/user'
let sbx

await r.step('create', async () => {
  sbx = r.track(await Sandbox.create({ timeoutMs: 300_000, requestTimeoutMs: 180_000, metadata: { purpose: 'parity-files' } }))
})

await r.step('write with metadata (multipart and octet-stream), read it back', async () => {
  const metadata = { author: 'mish', purpose: 'upload' }
  for (const useOctetStream of [false, true]) {
    const name = `meta-${useOctetStream ? 'octet' : 'form'}.txt`
    const info = await sbx.files.write(name, 'with metadata', { metadata, useOctetStream })
    assert.deepEqual(info.metadata, metadata, `write (${name})`)
    assert.deepEqual((await sbx.files.getInfo(name)).metadata, metadata, `getInfo (${name})`)
  }
  // Mixed-case keys come back lowercased, as envd keeps them.
  const info = await sbx.files.write('meta-case.txt', 'x', { metadata: { Author: 'A' } })
  assert.deepEqual(info.metadata, { author: 'A' })
})

await r.step('metadata: absent, per file of writeFiles, in list, after rename, cleared by an overwrite', async () => {
  const plain = await sbx.files.write('meta-none.txt', 'none')
  assert.equal(plain.metadata, undefined)
  assert.equal((await sbx.files.getInfo('meta-none.txt')).metadata, undefined)

  const many = await sbx.files.writeFiles([
    { path: 'meta-multi/1.txt', data: '1' },
    { path: 'meta-multi/2.txt', data: '2' },
  ], { metadata: { source: 'suite' } })
  assert.equal(many.length, 2)
  for (const i of many) {
    assert.deepEqual(i.metadata, { source: 'suite' })
    assert.deepEqual((await sbx.files.getInfo(i.path)).metadata, { source: 'suite' })
  }
  const listed = (await sbx.files.list('meta-multi')).find((e) => e.name === '1.txt')
  assert.deepEqual(listed?.metadata, { source: 'suite' })

  await sbx.files.write('meta-old.txt', 'x', { metadata: { stage: 'renamed' } })
  assert.deepEqual((await sbx.files.rename('meta-old.txt', 'meta-new.txt')).metadata, { stage: 'renamed' })

  await sbx.files.write('meta-over.txt', 'first', { metadata: { author: 'mish' } })
  assert.equal((await sbx.files.write('meta-over.txt', 'second')).metadata, undefined)
  assert.equal((await sbx.files.getInfo('meta-over.txt')).metadata, undefined)
})

await r.step('metadata set as a user.e2b.* xattr inside the sandbox is seen', async () => {
  await sbx.files.write('meta-xattr.txt', 'x')
  await sbx.commands.run(`python3 -c "import os; os.setxattr('${home}/meta-xattr.txt', 'user.e2b.author', b'mish')"`)
  assert.deepEqual((await sbx.files.getInfo('meta-xattr.txt')).metadata, { author: 'mish' })
})

await r.step('entry info: owner and group names, mode, permissions, symlink target', async () => {
  await sbx.files.write('info.txt', 'test')
  const f = await sbx.files.getInfo('info.txt')
  assert.equal(f.type, FileType.FILE)
  assert.equal(f.path, `${home}/info.txt`)
  assert.equal(f.size, 4)
  assert.equal(f.mode, 0o644)
  assert.equal(f.permissions, '-rw-r--r--')
  assert.equal(f.owner, 'user')
  assert.equal(f.group, 'user')
  assert.ok(f.modifiedTime instanceof Date)

  await sbx.files.makeDir('info-dir')
  const d = await sbx.files.getInfo('info-dir')
  assert.equal(d.type, FileType.DIR)
  assert.equal(d.mode, 0o755)
  assert.equal(d.permissions, 'drwxr-xr-x')
  assert.equal(d.owner, 'user')
  assert.equal(d.group, 'user')

  const root = await sbx.files.getInfo('/etc/passwd')
  assert.equal(root.owner, 'root')
  assert.equal(root.group, 'root')

  await sbx.commands.run('ln -s info.txt info-link.txt', { cwd: home })
  const l = await sbx.files.getInfo('info-link.txt')
  assert.equal(l.name, 'info-link.txt')
  assert.equal(l.symlinkTarget, `${home}/info.txt`)

  const entries = await sbx.files.list(home)
  const e = entries.find((x) => x.name === 'info.txt')
  assert.equal(e?.owner, 'user')
  assert.equal(e?.group, 'user')
})

await r.step('watchDir with includeEntry', async () => {
  await sbx.files.makeDir('watched-entry')
  const events = []
  const w = await sbx.files.watchDir('watched-entry', (ev) => events.push(ev), { includeEntry: true })
  try {
    await sbx.files.write('watched-entry/new.txt', 'hello')
    const ev = await waitFor('an event with its entry', () => events.find((x) => x.name === 'new.txt' && x.entry), {
      timeoutMs: 10_000,
      describe: () => `events ${JSON.stringify(events)}`,
    })
    assert.equal(ev.entry.name, 'new.txt')
    assert.equal(ev.entry.type, FileType.FILE)
    assert.equal(ev.entry.path, `${home}/watched-entry/new.txt`)
    assert.equal(ev.entry.owner, 'user')
  } finally {
    await w.stop()
  }
})

await r.step('watchDir with allowNetworkMounts on a local directory', async () => {
  await sbx.files.makeDir('watched-net')
  const events = []
  const w = await sbx.files.watchDir('watched-net', (ev) => events.push(ev), { allowNetworkMounts: true })
  try {
    await sbx.files.write('watched-net/a.txt', 'a')
    await waitFor('an event', () => events.some((x) => x.name === 'a.txt'), {
      timeoutMs: 10_000,
      describe: () => `events ${JSON.stringify(events)}`,
    })
  } finally {
    await w.stop()
  }
})

await r.step('write creates missing parents, also under /, owned by the user', async () => {
  const dir = `/newdir-${tag}`
  const info = await sbx.files.write(`${dir}/sub/x.txt`, 'made')
  assert.equal(info.path, `${dir}/sub/x.txt`)
  assert.equal(await sbx.files.read(`${dir}/sub/x.txt`), 'made')
  for (const p of [dir, `${dir}/sub`]) {
    const d = await sbx.files.getInfo(p)
    assert.equal(d.owner, 'user', p)
    assert.equal(d.mode, 0o755, p)
  }
  // Nothing of the agent's staging is left beside it.
  const { stdout } = await sbx.commands.run('ls -a /')
  assert.ok(!stdout.includes('.airlock-mkdir-'), stdout)
  // The user empties what it owns; root (without CAP_DAC_OVERRIDE in a
  // sandbox) removes the directory from /, which is root's.
  await sbx.files.remove(`${dir}/sub`)
  await sbx.files.remove(dir, { user: 'root' })
  assert.equal(await sbx.files.exists(dir), false)
})

await r.step('signed downloadUrl and uploadUrl work in URL mode', async () => {
  await sbx.files.write('hello.txt', 'hello world')
  const down = await sbx.downloadUrl('hello.txt', { useSignatureExpiration: 10_000 })
  let res = await fetch(down)
  assert.equal(res.status, 200, await res.clone().text())
  assert.equal(await res.text(), 'hello world')

  const asRoot = await sbx.downloadUrl('/etc/passwd', { user: 'root' })
  res = await fetch(asRoot)
  assert.equal(res.status, 200, await res.clone().text())

  const up = await sbx.uploadUrl('uploaded.txt', { useSignatureExpiration: 10_000 })
  const form = new FormData()
  form.append('file', 'file content')
  res = await fetch(up, { method: 'POST', body: form })
  assert.equal(res.status, 200, await res.clone().text())
  assert.deepEqual(await res.json(), [{ name: 'uploaded.txt', path: `${home}/uploaded.txt`, type: 'file' }])
  assert.equal(await sbx.files.read('uploaded.txt'), 'file content')
})

await r.step('an expired or forged signature is refused as envd refuses it', async () => {
  const expired = await sbx.downloadUrl('hello.txt', { useSignatureExpiration: -10_000 })
  let res = await fetch(expired)
  assert.equal(res.status, 401)
  assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })

  const u = new URL(await sbx.downloadUrl('hello.txt'))
  u.searchParams.set('path', '/etc/shadow') // the signature covers the path
  res = await fetch(u)
  assert.equal(res.status, 401)
})

await r.step('a kill during a command: TimeoutError "killed or reached its end of life"', async () => {
  const victim = r.track(await Sandbox.create({ timeoutMs: 300_000, requestTimeoutMs: 180_000 }))
  const cmd = await victim.commands.run('sleep 60', { background: true })
  await victim.kill()
  const err = await cmd.wait().catch((e) => e)
  assert.ok(err instanceof TimeoutError, `got ${err && err.constructor && err.constructor.name}: ${err}`)
  assert.match(err.message, /sandbox was killed or reached its end of life/)
  assert.equal(await victim.isRunning(), false)
}, 240_000)

await r.step('kill', async () => {
  await sbx.kill()
})

r.done()
