// Package importrules holds no code: its test keeps the module's import
// rules, the ones that keep a client, a command or an agent from linking
// what it has no use for (the central controllers, the host agent's QEMU,
// the event log's PostgreSQL driver).
package importrules
