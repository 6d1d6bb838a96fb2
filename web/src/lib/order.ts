// The order of a Dot's queue: the dispatcher's (internal/lifecycle.NextTask),
// checked against it by e2e/queue-order.spec.ts over a fixture Go writes.

export interface Queued {
  metadata: { name: string; creationTimestamp?: string };
  spec: { priority?: number };
}

/** The higher priority first, then the older, then by name. */
export function dispatchOrder(a: Queued, b: Queued): number {
  return (
    (b.spec.priority ?? 0) - (a.spec.priority ?? 0) ||
    Date.parse(a.metadata.creationTimestamp ?? '') - Date.parse(b.metadata.creationTimestamp ?? '') ||
    (a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0)
  );
}
