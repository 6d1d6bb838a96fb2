export function NewDot() {
  return <div class="p-6">Create a Dot</div>;
}
export function DotSettings(_: { ns: string; name: string }) {
  return <div class="p-6">Settings</div>;
}
