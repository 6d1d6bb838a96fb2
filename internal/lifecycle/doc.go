// Package lifecycle holds the decisions of a Dot's work and sleep (ref 9.2,
// 9.5) as pure functions, one family a file: which task is dispatched next
// (dispatch.go), whether a Dot has work that keeps its computer awake, when
// it sleeps and when it wakes (power.go), what a delivery's outcome does to
// its outbox row (delivery.go), the phase an Approval the guest asked for
// takes (approvals.go), and whether an MCP server the Dot added itself is
// written (mcpadd.go). They read facts and fetch nothing, so each is a table
// test; the controllers and the host agent gather the facts (the log's
// projection, lifecycle/projection, among them) and act on the answer.
package lifecycle
