// E2B parity, network: what E2B's tests/sandbox/network.test.ts and
// internetAccess.test.ts exercise, through the real `e2b` SDK against an
// Airlock server (docs/e2b.md, "Network"): allowInternetAccess,
// network.allowOut/denyOut with E2B's precedence (allowOut wins),
// updateNetwork applied live, allowPublicTraffic, maskRequestHost, and the
// clear refusals (network.rules, denyOut by name).
//
// Run by integration/e2b_sdk_test.go (TestE2BSDK, no internet: the steps
// that need one are left out) and by integration/e2b_network_test.go
// (TestE2BNetworkFakeInternet), which sets SMOKE_FAKE_INTERNET=1 and the
// fake internet's addresses:
//   SMOKE_NET_A, SMOKE_NET_B   two public addresses serving HTTP and HTTPS
//                              (the roles of 1.1.1.1 and 8.8.8.8 in E2B's tests)
//   SMOKE_NET_C, SMOKE_NET_D   two served addresses of one /24, SMOKE_NET_CIDR
//   SMOKE_NET_NAME             a name of the fake internet (resolves to SMOKE_NET_A)
//   SMOKE_NET_NAME2            another name (resolves outside SMOKE_NET_A)

import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

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

await r.step('updateNetwork: accepted; network.rules and denyOut by name refused', async () => {
  const sbx = await create({})
  await sbx.updateNetwork({ denyOut: ['8.8.8.8'] })
  assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  await sbx.updateNetwork({ denyOut: ({ allTraffic }) => [allTraffic] })
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  await assert.rejects(
    sbx.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { 'X-Test': 'v' } } }] } }),
    /network\.rules/,
  )
  await assert.rejects(sbx.updateNetwork({ denyOut: ['example.com'] }), /denyOut/)
  await assert.rejects(Sandbox.create({ ...createOpts, network: { rules: { 'a.example': [{}] } } }), /network\.rules/)
  await sbx.kill()
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

if (process.env.SMOKE_FAKE_INTERNET !== '1') {
  console.log('parity-network: SMOKE_FAKE_INTERNET is not 1: the steps that need an internet are left out')
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

await r.step('always-denied destinations stay denied whatever allowOut says', async () => {
  const sbx = await create({ network: { denyOut: [ALL], allowOut: ['169.254.169.254', '127.0.0.1', '10.0.0.0/8'] } })
  await expectReach(sbx, 'http://169.254.169.254/', false, 'metadata')
  await expectReach(sbx, 'http://10.99.0.5/', false, 'a private address')
  await sbx.kill()
})

r.done()
