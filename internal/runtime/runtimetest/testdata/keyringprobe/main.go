// Command keyringprobe is a test-only helper of the runtime conformance
// suite. The suite runs it on the host inside a sandbox's user namespace as
// the sandbox's root (nsenter --user --setuid 0 --setgid 0), to compare
// that user's keyrings with host root's. It prints "user-keyring SERIAL"
// and then, per command:
//
//	find DESC        "found SERIAL" or "absent" for a user key DESC in @u
//	add DESC         adds a user key DESC to @u: "added SERIAL"
//	invalidate DESC  invalidates the user key DESC of @u: "invalidated"
package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "keyringprobe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: keyringprobe find|add|invalidate DESC")
	}
	ring, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 1, 0, 0)
	if err != nil {
		return fmt.Errorf("user keyring: %w", err)
	}
	fmt.Printf("user-keyring %d\n", ring)
	desc := args[1]
	switch args[0] {
	case "find":
		id, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", desc, 0)
		switch {
		case errors.Is(err, unix.ENOKEY):
			fmt.Println("absent")
		case err != nil:
			return fmt.Errorf("search: %w", err)
		default:
			fmt.Printf("found %d\n", id)
		}
	case "add":
		id, err := unix.AddKey("user", desc, []byte("from the sandbox's root"), unix.KEY_SPEC_USER_KEYRING)
		if err != nil {
			return fmt.Errorf("add_key: %w", err)
		}
		fmt.Printf("added %d\n", id)
	case "invalidate":
		id, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", desc, 0)
		if err != nil {
			return fmt.Errorf("search: %w", err)
		}
		if _, err := unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0); err != nil {
			return fmt.Errorf("invalidate: %w", err)
		}
		fmt.Println("invalidated")
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	return nil
}
