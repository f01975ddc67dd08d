// E2B parity, network: what E2B's tests/sandbox/network.test.ts,
// internetAccess.test.ts, networkTransform.test.ts and tests/secret exercise,
// through the real `e2b` SDK against an Airlock server (docs/e2b.md,
// "Network" and "Secrets"): allowInternetAccess, network.allowOut/denyOut
// with E2B's precedence (allowOut wins), updateNetwork applied live,
// allowPublicTraffic, maskRequestHost, network.rules (headers the egress
// proxy sets on a sandbox's HTTPS requests to a host), the secrets API and
// secrets used in network.rules through Secret.fill placeholders, and the
// clear refusals (identity tokens, rules for addresses, denyOut by name).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK), whose server runs inside
// the egress tests' fake internet and sets SMOKE_FAKE_INTERNET=1 and its
// addresses; without SMOKE_FAKE_INTERNET=1 the steps that need an internet
// are left out:
//   SMOKE_NET_A, SMOKE_NET_B   two public addresses serving HTTP and HTTPS
//                              (the roles of 1.1.1.1 and 8.8.8.8 in E2B's tests)
//   SMOKE_NET_C, SMOKE_NET_D   two served addresses of one /24, SMOKE_NET_CIDR
//   SMOKE_NET_NAME             a name of the fake internet (resolves to SMOKE_NET_A)
//   SMOKE_NET_NAME2            another name (resolves outside SMOKE_NET_A)
// The fake internet's servers answer /headers with the request's headers as
// JSON, and /headers?digest=1 with their SHA-256 only.

import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'

import { Sandbox, Secret, SecretNotFoundError } from 'e2b'

import { Runner, env, waitFor } from './lib.mjs'

const cfg = env()
const r = new Runner('parity-network')
const createOpts = { timeoutMs: 300_000, requestTimeoutMs: 180_000 }
const ALL = '0.0.0.0/0'

// create makes a sandbox with opts, killed if a later step fails.
async function create(opts) {
  return r.track(await Sandbox.create({ ...createOpts, ...opts }))
}

// reaches reports whether the sandbox gets the fake internet's own answer
// from url (its servers answer "fakenet proto=…"; Airlock's proxy answers a
// refused HTTP request itself, with an error status). TLS to a bare
// address is relayed untouched: -k, the fake internet's certificate is not
// in the sandbox's trust store.
async function reaches(sbx, url) {
  try {
    const res = await sbx.commands.run(`curl -sk --connect-timeout 3 --max-time 8 ${url}`)
    return res.exitCode === 0 && res.stdout.includes('fakenet proto=')
  } catch {
    return false
  }
}

async function expectReach(sbx, url, want, what) {
  assert.equal(await reaches(sbx, url), want, `${what}: ${url} ${want ? 'unreachable' : 'reachable'}`)
}

// guestFetch sends a request to a guest port through the SDK's own header
// routing (E2B_SANDBOX_URL, E2b-Sandbox-Id / -Port).
function guestFetch(sbx, port, headers = {}) {
  return fetch(cfg.E2B_SANDBOX_URL, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port), ...headers },
    signal: AbortSignal.timeout(10_000),
  })
}

// serve starts python's http.server on port and waits for it.
async function serve(sbx, port) {
  await sbx.commands.run(`python3 -m http.server ${port}`, { background: true, timeoutMs: 0, cwd: '/tmp' })
  await waitFor(`the guest's server on ${port}`, async () => {
    const res = await guestFetch(sbx, port, { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken ?? '' })
    await res.arrayBuffer()
    return res.status === 200
  })
}

await r.step('create with allowOut/denyOut: getInfo reports internet access off', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: ['192.0.2.10', 'example.com'] } })
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  await sbx.kill()
})

await r.step('allowInternetAccess true/false: getInfo reports it', async () => {
  for (const want of [true, false]) {
    const sbx = await create({ allowInternetAccess: want })
    assert.equal((await sbx.getInfo()).allowInternetAccess, want)
    await sbx.kill()
  }
})

await r.step('updateNetwork: accepted, with rules too; denyOut by name refused', async () => {
  const sbx = await create({})
  await sbx.updateNetwork({ denyOut: ['8.8.8.8'] })
  assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  await sbx.updateNetwork({ denyOut: ({ allTraffic }) => [allTraffic] })
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  await sbx.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { 'X-Test': 'v' } } }] } })
  await assert.rejects(sbx.updateNetwork({ denyOut: ['example.com'] }), /denyOut/)
  await sbx.kill()
})

await r.step('network.rules: bad or unsupported rules refused clearly', async () => {
  const refused = async (rules, re) => {
    await assert.rejects(Sandbox.create({ ...createOpts, network: { rules } }), re)
  }
  const h = (headers) => [{ transform: { headers } }]
  await refused({ 'api.example.com': h({ 'X-Test': 'v\r\nX-Evil: 1' }) }, /control characters/)
  await refused({ 'api.example.com': h({ Host: 'evil.example' }) }, /frames or routes/)
  await refused({ 'api.example.com': h({ 'X-Big': 'v'.repeat(9000) }) }, /at most/)
  await refused({ '*.com': h({ 'X-Test': 'v' }) }, /public suffix/)
  await refused({ '192.0.2.1': h({ 'X-Test': 'v' }) }, /addresses or CIDR/)
  await refused({ 'api.example.com': h({ Authorization: 'Bearer ${e2b.identity.tokens.aws}' }) }, /identity tokens/)
  const many = {}
  for (let i = 0; i < 33; i++) many[`h${i}.example.com`] = h({ 'X-Test': 'v' })
  await refused(many, /at most 32/)
})

// A run's own secret names, deleted at the end.
const tag = randomBytes(4).toString('hex')
const secretNames = []
function secretName(base) {
  const n = `${base}-${tag}`
  secretNames.push(n)
  return n
}

await r.step('secrets: create, getInfo by ID and name, list pages, update, exists, destroy', async () => {
  const name = secretName('openai-api-key')
  const info = await Secret.create(name.toUpperCase(), 'sk-test', { metadata: { env: 'test' } })
  assert.match(info.secretId, /^sec_/)
  assert.equal(info.name, name) // lower-cased, as E2B stores names
  assert.equal(info.version, 1)
  assert.deepEqual(info.metadata, { env: 'test' })
  assert.ok(info.createdAt instanceof Date && info.updatedAt instanceof Date)
  assert.ok(!('value' in info))
  await assert.rejects(Secret.create(name, 'again'), /already|409/)

  assert.equal((await Secret.getInfo(info.secretId)).name, name)
  assert.equal((await Secret.getInfo(name)).secretId, info.secretId)
  await assert.rejects(Secret.getInfo(`missing-${tag}`), SecretNotFoundError)
  await assert.rejects(Secret.update(`missing-${tag}`, 'v'), SecretNotFoundError)

  const updated = await Secret.update(info.secretId, 'sk-test-2')
  assert.equal(updated.secretId, info.secretId)
  assert.equal(updated.version, 2)
  assert.deepEqual(updated.metadata, { env: 'test' })
  assert.deepEqual((await Secret.update(name, 'sk-test-3', { metadata: { env: 'prod' } })).metadata, { env: 'prod' })

  for (const base of ['key-a', 'key-b', 'key-c']) await Secret.create(secretName(base), base)
  const paginator = Secret.list({ limit: 2 })
  const seen = []
  while (paginator.hasNext) {
    const page = await paginator.nextItems()
    assert.ok(page.length <= 2)
    seen.push(...page.map((s) => s.name))
  }
  for (const n of secretNames) assert.ok(seen.includes(n), `${n} not listed: ${seen}`)

  assert.equal(await Secret.exists(name), true)
  assert.equal(await Secret.exists(`absent-${tag}`), false)
  const doomed = secretName('to-delete')
  const d = await Secret.create(doomed, 'v')
  assert.equal(await Secret.destroy(d.secretId), true)
  assert.equal(await Secret.exists(d.secretId), false)
  assert.equal(await Secret.destroy(d.secretId), false)
  assert.equal(Secret.fill(name), `\${e2b.secrets.${name}}`)
})

await r.step('allowPublicTraffic false: a guest port needs the traffic token', async () => {
  const sbx = await create({ network: { allowPublicTraffic: false } })
  assert.ok(sbx.trafficAccessToken, 'no trafficAccessToken')
  await serve(sbx, 8080)
  const anon = await guestFetch(sbx, 8080)
  await anon.arrayBuffer()
  assert.equal(anon.status, 401)
  const authed = await guestFetch(sbx, 8080, { 'e2b-traffic-access-token': sbx.trafficAccessToken })
  await authed.arrayBuffer()
  assert.equal(authed.status, 200)
  await sbx.kill()
})

await r.step('allowPublicTraffic true: a guest port answers anyone', async () => {
  const sbx = await create({ network: { allowPublicTraffic: true } })
  await serve(sbx, 8080)
  const res = await guestFetch(sbx, 8080)
  await res.arrayBuffer()
  assert.equal(res.status, 200)
  await sbx.kill()
})

await r.step('maskRequestHost: the guest server sees the masked Host', async () => {
  const sbx = await create({ network: { maskRequestHost: 'custom-host.example.com:${PORT}' } })
  const capture = [
    'import http.server',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    "        open('/tmp/host.txt', 'w').write(self.headers.get('Host', ''))",
    '        self.send_response(200)',
    '        self.end_headers()',
    '    def log_message(self, *a): pass',
    "http.server.HTTPServer(('', 8080), H).serve_forever()",
  ].join('\n')
  await sbx.files.write('/tmp/capture.py', capture)
  await sbx.commands.run('python3 /tmp/capture.py', { background: true, timeoutMs: 0 })
  await waitFor('the capturing server', async () => {
    const res = await guestFetch(sbx, 8080)
    await res.arrayBuffer()
    return res.status === 200
  })
  const host = await sbx.files.read('/tmp/host.txt')
  assert.equal(host, 'custom-host.example.com:8080')
  await sbx.kill()
})

// cleanupSecrets deletes the run's secrets.
async function cleanupSecrets() {
  for (const n of secretNames) await Secret.destroy(n)
}

if (process.env.SMOKE_FAKE_INTERNET !== '1') {
  console.log('parity-network: SMOKE_FAKE_INTERNET is not 1: the steps that need an internet are left out')
  await cleanupSecrets()
  r.done()
}

const A = process.env.SMOKE_NET_A
const B = process.env.SMOKE_NET_B
const C = process.env.SMOKE_NET_C
const D = process.env.SMOKE_NET_D
const CIDR = process.env.SMOKE_NET_CIDR
const NAME = process.env.SMOKE_NET_NAME
const NAME2 = process.env.SMOKE_NET_NAME2
for (const [k, v] of Object.entries({ A, B, C, D, CIDR, NAME, NAME2 })) {
  assert.ok(v, `SMOKE_NET_${k} is not set`)
}

await r.step('internet access enabled: names and bare addresses, HTTP and HTTPS', async () => {
  const sbx = await create({ allowInternetAccess: true })
  await expectReach(sbx, `https://${NAME}/`, true, 'internet on')
  await expectReach(sbx, `http://${NAME}/`, true, 'internet on')
  await expectReach(sbx, `https://${A}/`, true, 'internet on, by address')
  await sbx.kill()
})

await r.step('internet access disabled: nothing', async () => {
  const sbx = await create({ allowInternetAccess: false })
  await expectReach(sbx, `https://${NAME}/`, false, 'internet off')
  await expectReach(sbx, `https://${A}/`, false, 'internet off')
  await sbx.kill()
})

await r.step('deny all, allow one address', async () => {
  const sbx = await create({ network: { denyOut: ({ allTraffic }) => [allTraffic], allowOut: [A] } })
  await expectReach(sbx, `https://${A}/`, true, 'allowOut')
  await expectReach(sbx, `https://${B}/`, false, 'denyOut all')
  await sbx.kill()
})

await r.step('deny one address, the rest stays open', async () => {
  const sbx = await create({ network: { denyOut: [B] } })
  await expectReach(sbx, `https://${B}/`, false, 'denyOut')
  await expectReach(sbx, `https://${A}/`, true, 'not denied')
  await expectReach(sbx, `https://${NAME}/`, true, 'a name, not denied')
  await sbx.kill()
})

await r.step('allow takes precedence over deny (addresses and a CIDR)', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: [A, B] } })
  await expectReach(sbx, `https://${A}/`, true, 'allowOut')
  await expectReach(sbx, `https://${B}/`, true, 'allowOut')
  await sbx.kill()
  const sbx2 = await create({ network: { denyOut: [CIDR], allowOut: [C] } })
  await expectReach(sbx2, `https://${C}/`, true, 'allowOut inside a denied CIDR')
  await expectReach(sbx2, `http://${C}/`, true, 'allowOut inside a denied CIDR')
  await expectReach(sbx2, `https://${D}/`, false, 'the rest of the denied CIDR')
  await sbx2.kill()
})

await r.step('deny all, allow a domain', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: [NAME] } })
  await expectReach(sbx, `https://${NAME}/`, true, 'allowOut by name')
  await expectReach(sbx, `https://${NAME2}/`, false, 'another name')
  await expectReach(sbx, `https://${B}/`, false, 'an address')
  await sbx.kill()
})

await r.step('updateNetwork applies live and an empty update clears the rules', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: [A] } })
  await expectReach(sbx, `https://${B}/`, false, 'before the update')
  await sbx.updateNetwork({})
  await expectReach(sbx, `https://${A}/`, true, 'after clearing')
  await expectReach(sbx, `https://${B}/`, true, 'after clearing')
  await sbx.updateNetwork({ denyOut: [B] })
  await expectReach(sbx, `https://${B}/`, false, 'after denying it')
  await expectReach(sbx, `https://${A}/`, true, 'others stay reachable')
  await sbx.kill()
})

// headersAt returns the headers the fake internet's server at url received
// from the sandbox (its /headers answer), or throws with curl's output.
async function headersAt(sbx, url, curlArgs = '') {
  const res = await sbx.commands.run(`curl -sS --max-time 10 ${curlArgs} ${url}`)
  try {
    return JSON.parse(res.stdout).headers
  } catch {
    throw new Error(`${url}: not the fake internet's /headers answer: ${res.stdout} ${res.stderr}`)
  }
}

// httpCode returns the status the sandbox gets from url.
async function httpCode(sbx, url) {
  const res = await sbx.commands.run(`curl -s -o /dev/null -w '%{http_code}' --max-time 10 ${url}`)
  return res.stdout.trim()
}

await r.step('network.rules: the header reaches its host only, over the sandbox\'s own', async () => {
  const value = 'e2b-transform-value-123'
  const sbx = await create({ network: { rules: { [NAME2]: [{ transform: { headers: { 'X-Test-Token': value } } }] } } })
  assert.deepEqual((await headersAt(sbx, `https://${NAME2}/headers`))['X-Test-Token'], [value])
  assert.deepEqual(
    (await headersAt(sbx, `https://${NAME2}/headers`, "-H 'X-Test-Token: from-the-guest'"))['X-Test-Token'],
    [value],
  )
  assert.equal((await headersAt(sbx, `https://${NAME}/headers`))['X-Test-Token'], undefined)
  // Cleartext HTTP is never given the header.
  assert.equal((await headersAt(sbx, `http://${NAME2}/headers`))['X-Test-Token'], undefined)
  // updateNetwork replaces the rules live.
  await sbx.updateNetwork({ rules: { [NAME]: [{ transform: { headers: { 'X-Test-Token': 'moved' } } }] } })
  assert.deepEqual((await headersAt(sbx, `https://${NAME}/headers`))['X-Test-Token'], ['moved'])
  assert.equal((await headersAt(sbx, `https://${NAME2}/headers`))['X-Test-Token'], undefined)
  await sbx.kill()
})

await r.step('secrets in network.rules: resolved by the proxy, never seen by the sandbox', async () => {
  const name = secretName('api-token')
  const value = `sk-${randomBytes(12).toString('hex')}`
  await Secret.create(name, value)
  const sbx = await create({
    network: { rules: { [NAME2]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }] } },
  })
  const want = 'sha256:' + createHash('sha256').update(`Bearer ${value}`).digest('hex')
  assert.deepEqual((await headersAt(sbx, `https://${NAME2}/headers?digest=1`)).Authorization, [want])
  // The sandbox never holds the value: not in its environment, its files,
  // nor what the API says of it; a placeholder it sends itself is not resolved.
  const env = await sbx.commands.run('env; cat /proc/1/environ 2>/dev/null | tr "\\0" "\\n"; true')
  assert.ok(!env.stdout.includes(value), 'the secret is in the sandbox environment')
  const grep = await sbx.commands.run(`grep -rl ${value} /etc /root /home /tmp 2>/dev/null; true`)
  assert.equal(grep.stdout.trim(), '', 'the secret is in a sandbox file')
  assert.ok(!JSON.stringify(await sbx.getInfo()).includes(value), 'getInfo shows the secret')
  const own = await headersAt(sbx, `https://${NAME}/headers`, `-H 'X-Try: ${Secret.fill(name)}'`)
  assert.deepEqual(own['X-Try'], [Secret.fill(name)])
  // A new value is used at once by the same rule.
  await Secret.update(name, 'rotated')
  await waitFor('the rotated secret', async () => {
    const h = await headersAt(sbx, `https://${NAME2}/headers?digest=1`)
    return h.Authorization?.[0] === 'sha256:' + createHash('sha256').update('Bearer rotated').digest('hex')
  })
  // A rule naming a secret the project does not have refuses the request.
  await sbx.updateNetwork({ rules: { [NAME2]: [{ transform: { headers: { Authorization: Secret.fill(`missing-${tag}`) } } }] } })
  assert.equal(await httpCode(sbx, `https://${NAME2}/headers`), '403')
  await sbx.kill()
})

await r.step('network.rules never reach always-denied destinations', async () => {
  const sbx = await create({
    network: { rules: { 'private.example': [{ transform: { headers: { 'X-Test-Token': 'v' } } }] } },
  })
  await expectReach(sbx, 'https://private.example/', false, 'a rule for a private address')
  await sbx.kill()
})

await r.step('always-denied destinations stay denied whatever allowOut says', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: ['169.254.169.254', '127.0.0.1', '10.0.0.0/8'] } })
  await expectReach(sbx, 'http://169.254.169.254/', false, 'metadata')
  await expectReach(sbx, 'http://10.99.0.5/', false, 'a private address')
  await sbx.kill()
})

await r.step('delete the run\'s secrets', cleanupSecrets)

r.done()
