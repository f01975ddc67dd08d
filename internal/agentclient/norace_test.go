//go:build !race

package agentclient_test

const raceEnabled = false
