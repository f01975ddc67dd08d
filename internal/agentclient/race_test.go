//go:build race

package agentclient_test

// raceEnabled: the race detector slows JSON and base64 about tenfold, so
// the volume tests move less data under it.
const raceEnabled = true
