import { stop } from './harness';

export default async function globalTeardown() {
  await stop();
}
