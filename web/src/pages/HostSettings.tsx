export function HostSettings() {
  return <div class="p-6">Settings</div>;
}
