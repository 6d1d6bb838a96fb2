import { expect, test } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { dispatchOrder } from '../src/lib/order';

// The page's Queue is the dispatcher's order: the fixture is
// internal/lifecycle.NextTask's, written by web/queueorder_test.go.
test("the Queue's order is the dispatcher's", () => {
  const fixture = JSON.parse(readFileSync(new URL('./queue-order.json', import.meta.url), 'utf8')) as {
    tasks: { name: string; priority: number; created: string }[];
    order: string[];
  };
  const sorted = fixture.tasks
    .map((t) => ({ metadata: { name: t.name, creationTimestamp: t.created }, spec: { priority: t.priority } }))
    .sort(dispatchOrder)
    .map((t) => t.metadata.name);
  expect(sorted).toEqual(fixture.order);
});
