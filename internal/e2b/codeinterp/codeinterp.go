// Package codeinterp names E2B's code interpreter as Airlock provides it: a
// server inside the sandbox, templates/code-interpreter/server.py in this
// repository, installed by the template built from
// templates/code-interpreter/recipe.yaml as GuestCommand.
//
// The server answers the @e2b/code-interpreter SDKs on Port (POST /execute
// streaming NDJSON, /contexts, GET /health). It is not running when a
// sandbox starts: the E2B gateway starts GuestCommand through Airlock's
// native commands API the first time a connection to Port is refused, then
// retries, as root: each code context is a process of its own in the
// guest (Python, or Node.js for JavaScript and TypeScript), run as the
// owner of its working directory.
//
// The tests of this package run the server on the host's python3.
package codeinterp

// Port is the guest port E2B's SDKs reach the code interpreter on.
const Port = 49999

// GuestCommand is the path of the code-interpreter server in the template.
// Run without arguments it listens on 0.0.0.0:Port (flags --host, --port).
const GuestCommand = "/usr/local/bin/airlock-code-interpreter"

// TemplateName is the name the code-interpreter template is built under
// (airlock template build -f templates/code-interpreter/recipe.yaml --name
// code-interpreter).
const TemplateName = "code-interpreter"

// ScriptPath is the server's source, relative to the repository root.
const ScriptPath = "templates/code-interpreter/server.py"

// HelperDir is where the template installs the server's helpers
// (worker.py, display.py, node_worker.js), which the server looks for
// beside itself first.
const HelperDir = "/usr/local/lib/airlock-code-interpreter"
