// A value views subscribe to, and the hook that rerenders on its change.
import { useEffect, useState } from 'preact/hooks';

type Listener = () => void;

/** A value views subscribe to. */
export class Cell<T> {
  private listeners = new Set<Listener>();
  constructor(private value: T) {}
  get = () => this.value;
  set(v: T) {
    this.value = v;
    this.listeners.forEach((l) => l());
  }
  subscribe(l: Listener) {
    this.listeners.add(l);
    return () => void this.listeners.delete(l);
  }
}

export function useCell<T>(cell: Cell<T>): T {
  const [, setTick] = useState(0);
  const rendered = cell.get();
  useEffect(() => {
    const stop = cell.subscribe(() => setTick((n) => n + 1));
    // The effect runs after the paint: a value set between the render and
    // now (a list that answered first, such as the Tasks' a view just
    // started) would otherwise wait for the next change to be shown.
    if (cell.get() !== rendered) setTick((n) => n + 1);
    return stop;
  }, [cell]);
  return rendered;
}
