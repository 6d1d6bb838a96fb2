import { start } from './harness';

export default async function globalSetup() {
  await start();
}
