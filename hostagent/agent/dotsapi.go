package agent

// A host agent hands its guests' events to the control plane and reads and
// acknowledges the outbox rows it delivers through the host routes of the
// Dots API (internal/dotsapi), never through PostgreSQL. RBAC lets only this
// role's holders (and administrators) through their prefix; the Dots API then
// checks that the caller is the agent of the host the path names.
// +kubebuilder:rbac:urls=/dots/v1/hostagent/*,verbs=get;post
