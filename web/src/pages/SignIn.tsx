// The sign-in page of a shared web client (server --web-sign-in): a person
// gives the token `invisible-dots user add` made for them, or its kubeconfig
// file; the server checks it with the API server and keeps it in a session
// (internal/webui/signin.go), so the page itself never holds it after this.
import { useState } from 'preact/hooks';
import { signIn, useSession } from '../lib/session';
import { btn, input } from '../lib/ui';

export function SignIn() {
  const s = useSession();
  const [token, setToken] = useState('');
  const [kubeconfig, setKubeconfig] = useState<{ name: string; text: string } | null>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setError('');
    if (!token.trim() && !kubeconfig) {
      setError('Paste your token, or choose your kubeconfig file.');
      return;
    }
    setBusy(true);
    try {
      await signIn(kubeconfig ? { kubeconfig: kubeconfig.text } : { token: token.trim() });
    } catch (err) {
      setError((err as Error).message);
      setBusy(false);
    }
  };
  return (
    <main id="main" class="grid min-h-full place-items-center p-6">
      <form class="flex w-full max-w-md flex-col gap-4 rounded-card border border-border bg-surface p-6" onSubmit={submit} aria-labelledby="sign-in-title">
        <h1 id="sign-in-title" class="text-xl font-semibold">
          Sign in to Dots
        </h1>
        {s.ended && (
          <p role="status" class="text-sm text-warn">
            {s.ended}
          </p>
        )}
        <p class="text-sm text-muted">
          This web client is shared: you act with your own rights. Give the token <code>invisible-dots user add</code> made for you, or the kubeconfig
          file it wrote. Ask the machine's owner for one.
        </p>
        <label class="flex flex-col gap-1 text-sm">
          Token
          <textarea
            class={`${input} font-mono text-xs`}
            rows={3}
            autoComplete="off"
            spellcheck={false}
            value={token}
            disabled={!!kubeconfig}
            onInput={(e) => setToken((e.target as HTMLTextAreaElement).value)}
          />
        </label>
        <label class="flex flex-col gap-1 text-sm">
          or a kubeconfig file
          <input
            type="file"
            class="text-sm"
            onChange={async (e) => {
              const f = (e.target as HTMLInputElement).files?.[0];
              setKubeconfig(f ? { name: f.name, text: await f.text() } : null);
            }}
          />
        </label>
        {error && (
          <p role="alert" class="text-sm text-danger">
            {error}
          </p>
        )}
        <button type="submit" class={btn.primary} disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <p class="text-xs text-muted">The session lasts until your token expires, at most 12 hours, or until you sign out.</p>
      </form>
    </main>
  );
}
