import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { dump, load } from 'js-yaml';
import { dotPath, getJSON, request, says } from '../lib/api';
import { computers, dots, useCell } from '../lib/live';
import { dotHref, navigate } from '../lib/router';
import { btn, input } from '../lib/ui';
import { BOUNDS, PERMISSIONS, type Decision } from '../lib/generated';
import {
  type Cause,
  type Change,
  type Judgement,
  type Spec,
  FORM_FIELDS,
  diff,
  dotResourcePath,
  dotsPath,
  getIn,
  owns,
  rebase,
  sendDot,
  setIn,
} from '../lib/config';
import type { Dot } from '../lib/types';
import { Namespaces } from './HostSettings';
import { SetupChecklist } from '../components/SetupChecklist';
import { scope, useCan } from '../lib/session';

const DEFAULT_MODEL = 'z-ai/glm-5.3-flash';

const PRESETS: { name: string; words: string; of: () => Record<string, Decision> }[] = [
  { name: 'Careful', words: 'asks before anything it does', of: () => Object.fromEntries(PERMISSIONS.map((p) => [p.name, 'ask' as Decision])) },
  { name: 'Balanced', words: 'the defaults: asks before what is hard to undo', of: () => ({}) },
  { name: 'Autonomous', words: 'asks for nothing', of: () => Object.fromEntries(PERMISSIONS.map((p) => [p.name, 'allow' as Decision])) },
];

/** A permission set to its default is saved as no entry. */
function normalizePermissions(perms: Record<string, Decision>): Record<string, Decision> | undefined {
  const out: Record<string, Decision> = {};
  for (const [k, v] of Object.entries(perms)) {
    const p = PERMISSIONS.find((x) => x.name === k);
    if (!p || p.default !== v) out[k] = v;
  }
  return Object.keys(out).length ? out : undefined;
}

const gi = (q: unknown, fallback: number) => {
  const m = /^(\d+)Gi$/.exec(String(q ?? ''));
  return m ? Number(m[1]) : fallback;
};
const minutes = (d: unknown) => {
  const s = String(d ?? '');
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(s);
  if (!s || !m) return BOUNDS.idleTimeoutMin;
  return Number(m[1] ?? 0) * 60 + Number(m[2] ?? 0) + Math.round(Number(m[3] ?? 0) / 60);
};

function useJudge(make: () => { method: 'POST' | 'PUT'; path: string; body: unknown } | null, deps: unknown[]) {
  const [j, setJ] = useState<Judgement>();
  const seq = useRef(0);
  useEffect(() => {
    const req = make();
    if (!req) return;
    const n = ++seq.current;
    const t = setTimeout(async () => {
      const r = await sendDot(req.method, req.path, req.body, true);
      if (n === seq.current) setJ(r);
    }, 350);
    return () => clearTimeout(t);
  }, deps);
  return j;
}

/** The causes a control owns, and the rest for the top of the form. */
function split(causes: Cause[], paths: string[]) {
  const mine = (p: string) => causes.filter((c) => owns(p, c.field));
  const rest = causes.filter((c) => !paths.some((p) => owns(p, c.field)));
  return { mine, rest };
}

function Problems({ id, causes }: { id: string; causes: Cause[] }) {
  return (
    <p id={id} class="mt-1 min-h-5 text-sm text-danger" data-testid="field-error">
      {causes.map((c) => c.message).join(' ')}
    </p>
  );
}

interface FieldProps {
  spec: Spec;
  set: (path: string[], v: unknown) => void;
  errorsOf: (p: string) => Cause[];
}

function Range({ id, label, path, unit, min, max, step = 1, value, write, errorsOf, hint }: {
  id: string;
  label: string;
  path: string;
  unit: string;
  min: number;
  max: number;
  step?: number;
  value: number;
  write: (n: number) => void;
  errorsOf: (p: string) => Cause[];
  hint?: string;
}) {
  const errs = errorsOf(path);
  return (
    <div class="mt-3" data-field={path}>
      <label for={id} class="block text-sm font-medium">
        {label}
      </label>
      <div class="mt-1 flex items-center gap-3">
        <input type="range" aria-hidden="true" tabIndex={-1} class="min-w-0 flex-1 accent-accent" min={min} max={max} step={step} value={Math.min(max, Math.max(min, value))} onInput={(e) => write(Number((e.target as HTMLInputElement).value))} />
        <input
          id={id}
          type="number"
          step={step}
          class={`w-24 ${input} ${errs.length ? 'border-danger' : ''}`}
          value={value}
          aria-invalid={errs.length > 0}
          aria-describedby={`${id}-err`}
          onInput={(e) => write(Number((e.target as HTMLInputElement).value))}
        />
        <span class="w-10 text-sm text-muted">{unit}</span>
      </div>
      {hint && <p class="text-xs text-muted">{hint}</p>}
      <Problems id={`${id}-err`} causes={errs} />
    </div>
  );
}

function Text({ id, label, path, spec, set, errorsOf, multiline, placeholder, hint }: FieldProps & {
  id: string;
  label: string;
  path: string;
  multiline?: boolean;
  placeholder?: string;
  hint?: string;
}) {
  const p = path.replace(/^spec\./, '').split('.');
  const errs = errorsOf(path);
  const props = {
    id,
    class: `mt-1 w-full ${input} ${errs.length ? 'border-danger' : ''}`,
    value: getIn(spec, p) ?? '',
    placeholder,
    'aria-invalid': errs.length > 0,
    'aria-describedby': `${id}-err`,
    onInput: (e: Event) => set(p, (e.target as HTMLInputElement).value),
  };
  return (
    <div class="mt-3" data-field={path}>
      <label for={id} class="block text-sm font-medium">
        {label}
      </label>
      {multiline ? <textarea rows={4} {...props} /> : <input {...props} />}
      {hint && <p class="text-xs text-muted">{hint}</p>}
      <Problems id={`${id}-err`} causes={errs} />
    </div>
  );
}

function Brain(f: FieldProps) {
  return (
    <>
      <Text {...f} id="f-model" label="Model (an OpenRouter model id)" path="spec.model.id" placeholder={DEFAULT_MODEL} />
      <Text {...f} id="f-summary" label="Summary model (optional)" path="spec.models.summary" hint="Writes the summary when the thread outgrows the model's window; the Dot's own model when empty." />
      <Range
        id="f-cost"
        label="Cost cap of a task or a chat turn"
        path="spec.limits.maxCostPerTaskUSD"
        unit="USD"
        min={BOUNDS.maxCostPerTaskUSD.min}
        max={BOUNDS.maxCostPerTaskUSD.max}
        step={0.01}
        value={getIn(f.spec, ['limits', 'maxCostPerTaskUSD']) ?? BOUNDS.maxCostPerTaskUSD.default}
        write={(n) => f.set(['limits', 'maxCostPerTaskUSD'], n)}
        errorsOf={f.errorsOf}
      />
      <Range
        id="f-steps"
        label="Steps a task may take"
        path="spec.limits.maxStepsPerTask"
        unit="steps"
        min={BOUNDS.maxStepsPerTask.min}
        max={BOUNDS.maxStepsPerTask.max}
        value={getIn(f.spec, ['limits', 'maxStepsPerTask']) ?? BOUNDS.maxStepsPerTask.default}
        write={(n) => f.set(['limits', 'maxStepsPerTask'], n)}
        errorsOf={f.errorsOf}
      />
    </>
  );
}

function ComputerFields(f: FieldProps) {
  return (
    <>
      <Range
        id="f-cpu"
        label="Processors"
        path="spec.computer.cpu"
        unit="CPUs"
        min={BOUNDS.cpu.min}
        max={BOUNDS.cpu.max}
        value={getIn(f.spec, ['computer', 'cpu']) ?? BOUNDS.cpu.default}
        write={(n) => f.set(['computer', 'cpu'], n)}
        errorsOf={f.errorsOf}
        hint="Applies the next time the computer starts."
      />
      <Range
        id="f-memory"
        label="Memory"
        path="spec.computer.memory"
        unit="GiB"
        min={BOUNDS.memoryGiB.min}
        max={BOUNDS.memoryGiB.max}
        value={gi(getIn(f.spec, ['computer', 'memory']), BOUNDS.memoryGiB.default)}
        write={(n) => f.set(['computer', 'memory'], `${n}Gi`)}
        errorsOf={f.errorsOf}
      />
      <Range
        id="f-disk"
        label="Disk"
        path="spec.computer.disk"
        unit="GiB"
        min={BOUNDS.diskGiB.min}
        max={BOUNDS.diskGiB.max}
        value={gi(getIn(f.spec, ['computer', 'disk']), BOUNDS.diskGiB.default)}
        write={(n) => f.set(['computer', 'disk'], `${n}Gi`)}
        errorsOf={f.errorsOf}
        hint="A disk can grow, never shrink."
      />
      <Range
        id="f-idle"
        label="Sleep after this long with nothing to do (0: never)"
        path="spec.computer.idleTimeout"
        unit="min"
        min={0}
        max={240}
        value={minutes(getIn(f.spec, ['computer', 'idleTimeout']))}
        write={(n) => f.set(['computer', 'idleTimeout'], `${n}m`)}
        errorsOf={f.errorsOf}
      />
    </>
  );
}

interface ToolInfo {
  name: string;
  permission: string;
  offered: boolean;
}

/** The tools of the Dot's own table, read from its computer: absent for a new Dot. */
type ToolTable = { tools: ToolInfo[] } | { off: string } | undefined;

/** The words for an allow that ends at until (spec.allowUntil). */
function timeLeft(until: string): string {
  const ms = Date.parse(until) - Date.now();
  if (!(ms > 0)) return 'allow ended: asks again';
  const min = Math.ceil(ms / 60000);
  return min < 60 ? `allowed for ${min} min more` : `allowed for ${Math.floor(min / 60)} h ${min % 60} min more`;
}

function Permissions(f: FieldProps & { table?: ToolTable; saved?: Spec }) {
  const perms: Record<string, Decision> = getIn(f.spec, ['permissions']) ?? {};
  const savedPerms: Record<string, Decision> = getIn(f.saved ?? {}, ['permissions']) ?? {};
  const allowUntil: Record<string, string> = getIn(f.saved ?? f.spec, ['allowUntil']) ?? {};
  const table = f.table;
  const write = (next: Record<string, Decision>) => f.set(['permissions'], normalizePermissions(next));
  const errs = f.errorsOf('spec.permissions');
  return (
    <div class="mt-3" data-field="spec.permissions">
      <div role="group" aria-label="Presets" class="flex flex-wrap gap-2">
        {PRESETS.map((p) => (
          <button key={p.name} type="button" class={btn.plain} title={p.words} onClick={() => write(p.of())}>
            {p.name}
            <span class="sr-only">: {p.words}</span>
          </button>
        ))}
      </div>
      <table class="mt-2 w-full text-sm">
        <thead class="sr-only">
          <tr>
            <th>Permission</th>
            <th>Decision</th>
          </tr>
        </thead>
        <tbody>
          {PERMISSIONS.map((p) => (
            <tr key={p.name} class="border-t border-border">
              <td class="py-1.5 pr-2">
                <label for={`perm-${p.name}`} class="font-medium">
                  {p.label}
                </label>{' '}
                <span class={`text-xs ${p.risk === 'high' ? 'text-danger' : p.risk === 'medium' ? 'text-warn' : 'text-muted'}`}>{p.risk} risk</span>
                <p class="text-xs text-muted">
                  {p.description} (<code>{p.name}</code>; default {p.default})
                </p>
                {table && 'tools' in table && (
                  <p class="text-xs" data-testid={`tools-${p.name}`}>
                    {table.tools
                      .filter((t) => t.permission === p.name)
                      .map((t, i) => (
                        <span key={t.name}>
                          {i > 0 && ', '}
                          <code class={t.offered ? '' : 'text-muted line-through'} title={t.offered ? 'offered to the model' : 'not offered to the model'}>
                            {t.name}
                          </code>
                          {!t.offered && <span class="sr-only"> (not offered)</span>}
                        </span>
                      ))}
                    {f.saved && (perms[p.name] ?? p.default) !== (savedPerms[p.name] ?? p.default) && (
                      <span class="text-warn"> · the tools show this change once it is saved</span>
                    )}
                  </p>
                )}
              </td>
              <td class="py-1.5 text-right">
                <select
                  id={`perm-${p.name}`}
                  class={input}
                  value={perms[p.name] ?? p.default}
                  onChange={(e) => write({ ...perms, [p.name]: (e.target as HTMLSelectElement).value as Decision })}
                >
                  <option value="allow">allow</option>
                  <option value="ask">ask</option>
                  <option value="deny">deny</option>
                </select>
                {allowUntil[p.name] && (perms[p.name] ?? p.default) === 'allow' && (
                  <p class="text-xs text-muted" data-testid={`allow-until-${p.name}`}>
                    {timeLeft(allowUntil[p.name])}
                  </p>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {table && 'off' in table && (
        <p class="text-xs text-muted" data-testid="tools-off">
          {table.off}
        </p>
      )}
      <Problems id="perm-err" causes={errs} />
    </div>
  );
}

const CONTROLLED = [
  'metadata.name',
  'metadata.namespace',
  'spec.instructions',
  'spec.model',
  'spec.models',
  'spec.limits.maxCostPerTaskUSD',
  'spec.limits.maxStepsPerTask',
  'spec.computer.cpu',
  'spec.computer.memory',
  'spec.computer.disk',
  'spec.computer.idleTimeout',
  'spec.permissions',
];

/** The YAML of the same draft; what the form has no control for stays as the YAML says. */
function YamlEditor({ spec, onSpec }: { spec: Spec; onSpec: (s: Spec) => void }) {
  const [text, setText] = useState(() => dump(spec, { noRefs: true }));
  const [error, setError] = useState('');
  const extra = Object.keys(spec).filter((k) => !FORM_FIELDS.includes(k));
  return (
    <div class="mt-3">
      <label for="f-yaml" class="block text-sm font-medium">
        The Dot's spec as YAML
      </label>
      <textarea
        id="f-yaml"
        rows={18}
        spellcheck={false}
        class={`mt-1 w-full font-mono text-xs ${input}`}
        value={text}
        aria-describedby="f-yaml-err"
        onInput={(e) => {
          const t = (e.target as HTMLTextAreaElement).value;
          setText(t);
          try {
            const v = load(t);
            if (v !== null && (typeof v !== 'object' || Array.isArray(v))) throw new Error('the spec is a mapping of fields');
            setError('');
            onSpec((v ?? {}) as Spec);
          } catch (err) {
            setError(`This YAML does not read: ${(err as Error).message.split('\n')[0]}. The form keeps the last YAML that read.`);
          }
        }}
      />
      <p id="f-yaml-err" class="min-h-5 text-sm text-danger">
        {error}
      </p>
      {extra.length > 0 && (
        <p class="text-sm text-muted" data-testid="yaml-only">
          The form has no control for {extra.join(', ')}: they are kept as this YAML says; edit them here.
        </p>
      )}
    </div>
  );
}

function ModeSwitch({ yaml, setYaml }: { yaml: boolean; setYaml: (y: boolean) => void }) {
  return (
    <div role="group" aria-label="Edit as" class="flex gap-1">
      <button type="button" aria-pressed={!yaml} class={!yaml ? btn.primary : btn.plain} onClick={() => setYaml(false)}>
        Form
      </button>
      <button type="button" aria-pressed={yaml} class={yaml ? btn.primary : btn.plain} onClick={() => setYaml(true)}>
        YAML
      </button>
    </div>
  );
}

const STEPS = ['Identity', 'Brain', 'Computer and safety'] as const;
const STEP_FIELDS: string[][] = [
  ['metadata.name', 'metadata.namespace', 'spec.instructions'],
  ['spec.model', 'spec.models', 'spec.limits'],
  ['spec.computer', 'spec.permissions'],
];

/** Create a Dot (/new): three steps, or the YAML; the dry run judges as the person types. */
export function NewDot() {
  const can = useCan(scope() || 'default');
  const [name, setName] = useState('');
  const [ns, setNs] = useState('default');
  const [spec, setSpec] = useState<Spec>({ model: { provider: 'openrouter', id: DEFAULT_MODEL } });
  const [step, setStep] = useState(0);
  const [yaml, setYaml] = useState(false);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<Judgement>();
  const body = () => ({ apiVersion: 'dots.invisible.dev/v1alpha1', kind: 'Dot', metadata: { name, namespace: ns }, spec });
  const judged = useJudge(() => (name ? { method: 'POST', path: dotsPath(ns), body: body() } : null), [name, ns, JSON.stringify(spec)]);
  const j = result ?? judged;
  const causes = useMemo(() => {
    if (!j || j.ok) return [];
    if (j.reason === 'AlreadyExists') return [{ field: 'metadata.name', message: `${ns} already has a Dot named ${name}; choose another name.` }];
    return j.causes.length ? j.causes : [{ field: '', message: j.message }];
  }, [j]);
  const { mine, rest } = split(causes, CONTROLLED);
  const f: FieldProps = { spec, set: (p, v) => (setResult(undefined), setSpec((s) => setIn(s, p, v))), errorsOf: mine };
  const stepProblems = (i: number) => causes.filter((c) => STEP_FIELDS[i].some((p) => owns(p, c.field))).length;

  async function create(e: Event) {
    e.preventDefault();
    setBusy(true);
    const r = await sendDot('POST', dotsPath(ns), body(), false);
    setBusy(false);
    if (r.ok) navigate(dotHref(ns, name, 'chat'));
    else setResult(r);
  }

  return (
    <form class="mx-auto max-w-3xl p-4 md:p-6" onSubmit={create} noValidate>
      <div class="flex flex-wrap items-center gap-3">
        <h1 class="text-2xl font-semibold">Create a Dot</h1>
        <div class="ml-auto">
          <ModeSwitch yaml={yaml} setYaml={setYaml} />
        </div>
      </div>
      <div class="mt-3" data-field="metadata.name">
        <label for="f-name" class="block text-sm font-medium">
          Name
        </label>
        <input
          id="f-name"
          class={`mt-1 w-full ${input} ${mine('metadata.name').length ? 'border-danger' : ''}`}
          value={name}
          autoFocus
          placeholder="helper"
          aria-invalid={mine('metadata.name').length > 0}
          aria-describedby="f-name-err"
          onInput={(e) => (setResult(undefined), setName((e.target as HTMLInputElement).value))}
        />
        <p class="text-xs text-muted">1 to 40 characters of a-z, 0-9 and -.</p>
        <Problems id="f-name-err" causes={mine('metadata.name').concat(mine('metadata.namespace'))} />
      </div>
      <Namespaces value={ns} onChange={setNs} />
      {yaml ? (
        <YamlEditor spec={spec} onSpec={(s) => (setResult(undefined), setSpec(s))} />
      ) : (
        <>
          <nav aria-label="Steps" class="mt-4 flex flex-wrap gap-1 border-b border-border">
            {STEPS.map((s, i) => (
              <button
                key={s}
                type="button"
                aria-current={step === i ? 'step' : undefined}
                class={`-mb-px border-b-2 px-3 py-2 text-sm ${step === i ? 'border-accent font-semibold' : 'border-transparent text-muted'}`}
                onClick={() => setStep(i)}
              >
                {i + 1}. {s}
                {stepProblems(i) > 0 && <span class="text-danger"> ({stepProblems(i)} to fix)</span>}
              </button>
            ))}
          </nav>
          {step === 0 && <Text {...f} id="f-instructions" label="Instructions (how it should work)" path="spec.instructions" multiline />}
          {step === 1 && <Brain {...f} />}
          {step === 2 && (
            <>
              <ComputerFields {...f} />
              <h2 class="mt-4 font-semibold">Permissions</h2>
              <Permissions {...f} />
            </>
          )}
        </>
      )}
      {rest.length > 0 && (
        <ul role="alert" class="mt-3 rounded-card border border-danger p-3 text-sm text-danger" data-testid="form-errors">
          {rest.map((c, i) => (
            <li key={i}>
              {c.field ? <code>{c.field}</code> : null} {c.message}
            </li>
          ))}
        </ul>
      )}
      <div class="mt-4 flex flex-wrap items-center gap-2">
        {!yaml && step > 0 && (
          <button type="button" class={btn.plain} onClick={() => setStep(step - 1)}>
            Back
          </button>
        )}
        {!yaml && step < STEPS.length - 1 && (
          <button type="button" class={btn.plain} onClick={() => setStep(step + 1)}>
            Next
          </button>
        )}
        <button type="submit" class={`ml-auto ${btn.primary}`} disabled={busy || !name || causes.length > 0}>
          Create {name || 'the Dot'}
        </button>
      </div>
      <p role="status" class="mt-1 h-5 text-right text-xs text-muted">
        {!name ? 'Name the Dot to have its config checked.' : j?.ok ? 'The API server takes this config.' : ''}
      </p>
      {/* The preflight: what this host lacks to run the Dot, the same list Home shows. */}
      {can('get', '/dots/v1/doctor') && <SetupChecklist />}
    </form>
  );
}

const show = (v: unknown) => (v === undefined ? 'not set' : typeof v === 'string' ? v : JSON.stringify(v));

/** A Dot's settings: the same config edited in place, saved only on the resourceVersion it began from. */
export function DotSettings({ ns, name }: { ns: string; name: string }) {
  const live = useCell(dots).items.get(`${ns}/${name}`);
  const [base, setBase] = useState<Dot>();
  const [spec, setSpec] = useState<Spec>({});
  const [yaml, setYaml] = useState(false);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<Judgement>();
  const [saved, setSaved] = useState('');
  const [loadError, setLoadError] = useState('');
  const [rebased, setRebased] = useState<Change[]>();
  const computer = useCell(computers).items.get(`${ns}/${name}`);
  const running = computer?.status?.state === 'RUNNING';
  const can = useCan(ns);
  const [table, setTable] = useState<ToolTable>();
  useEffect(() => {
    if (!running) {
      setTable({ off: "The computer is not running, so its tool table cannot be read: start it to see the tools each permission covers. The permissions can be set meanwhile." });
      return;
    }
    getJSON<{ tools: ToolInfo[] }>(`${dotPath(ns, name)}/tools`)
      .then((t) => setTable({ tools: t.tools }))
      .catch((e) => setTable({ off: `The tool table could not be read: ${(e as Error).message}` }));
  }, [ns, name, running, base?.metadata.generation]);

  const begin = (d: Dot) => {
    setBase(d);
    setSpec(structuredClone(d.spec) as Spec);
  };
  useEffect(() => {
    getJSON<Dot>(dotResourcePath(ns, name))
      .then(begin)
      .catch((e) => setLoadError(`${name}'s config could not be read: ${says(e, 'Reload the page to try again.')}`));
  }, [ns, name]);

  const changes = base ? diff(base.spec, spec) : [];
  const body = (from = base!) => ({ ...from, metadata: { ...from.metadata }, spec, status: undefined });
  const judged = useJudge(() => (base && changes.length ? { method: 'PUT', path: dotResourcePath(ns, name), body: body() } : null), [
    JSON.stringify(spec),
    base?.metadata.resourceVersion,
  ]);
  // A 409 is about the resourceVersion, which the Dot's status moves too: only
  // a change of its config is a conflict for the person. Otherwise the edit
  // moves on to the newest version by itself.
  const [stale, setStale] = useState(false);
  // The base as it is now, not as it was when a 409 was asked about: a
  // status write that lands just after a rebase answers the rebase's own dry
  // run 409, and that answer must be judged against the rebased base.
  const baseNow = useRef(base);
  baseNow.current = base;
  async function newest(): Promise<Dot | undefined> {
    const latest = await getJSON<Dot>(dotResourcePath(ns, name));
    const now = baseNow.current!;
    if ((latest.metadata.generation ?? 0) > (now.metadata.generation ?? 0) && diff(now.spec, latest.spec).length) {
      setStale(true);
      return undefined;
    }
    setBase(latest);
    return latest;
  }
  useEffect(() => {
    if (judged?.status === 409) void newest();
  }, [judged]);
  const j = result ?? (changes.length ? judged : undefined);
  // The watch tells of a newer config by its generation, which only a change
  // of the spec moves (a watch that lags behind the edit's base is not one).
  const conflict = stale || (!!live && !!base && (live.metadata.generation ?? 0) > (base.metadata.generation ?? 0));
  const causes = j && !j.ok && j.status !== 409 ? (j.causes.length ? j.causes : [{ field: '', message: j.message }]) : [];
  const { mine, rest } = split(causes, CONTROLLED);
  const f: FieldProps = { spec, set: (p, v) => (setResult(undefined), setSaved(''), setSpec((s) => setIn(s, p, v))), errorsOf: mine };

  async function save() {
    setBusy(true);
    let r = await sendDot('PUT', dotResourcePath(ns, name), body(), false);
    if (r.status === 409) {
      const latest = await newest();
      if (latest) r = await sendDot('PUT', dotResourcePath(ns, name), body(latest), false);
    }
    setBusy(false);
    if (r.ok) {
      begin(r.body as Dot);
      setResult(undefined);
      setRebased(undefined);
      setSaved(`Saved. A running Dot uses it from its next turn; the computer's size applies at its next start.`);
    } else if (r.status !== 409) setResult(r);
  }

  async function rebaseOnLatest() {
    const latest = await getJSON<Dot>(dotResourcePath(ns, name));
    const theirs = diff(base!.spec, latest.spec);
    setBase(latest);
    setSpec(rebase(latest.spec as Spec, changes));
    setRebased(theirs);
    setResult(undefined);
    setStale(false);
  }

  async function remove(typed: string) {
    if (typed !== name) return;
    await request(dotResourcePath(ns, name), { method: 'DELETE' });
    navigate('/');
  }

  if (loadError)
    return (
      <p role="alert" class="p-6 text-danger">
        {loadError}
      </p>
    );
  if (!base) return <p class="p-6 text-muted">Reading {name}'s config…</p>;
  return (
    <div class="mx-auto max-w-3xl p-4 md:p-6">
      <div class="flex flex-wrap items-center gap-3">
        <h2 class="text-xl font-semibold">Settings</h2>
        <div class="ml-auto">
          <ModeSwitch yaml={yaml} setYaml={setYaml} />
        </div>
      </div>
      {conflict && (
        <div role="alert" class="mt-3 rounded-card border border-warn p-3 text-sm" data-testid="conflict">
          <p>
            {name}'s config changed elsewhere since you began (another tab, the command line, an Always allow). Nothing of yours was saved, and
            nothing of theirs will be undone.
          </p>
          <button type="button" class={`mt-2 ${btn.primary}`} onClick={() => void rebaseOnLatest()}>
            Keep my changes on top of theirs
          </button>
        </div>
      )}
      {rebased && (
        <p role="status" class="mt-3 rounded-card bg-surface-2 p-3 text-sm" data-testid="rebased">
          Your changes are now on top of the newest config
          {rebased.length ? `; the other change set ${rebased.map((c) => c.path.join('.')).join(', ')}` : ''}. Review and save.
        </p>
      )}
      {yaml ? (
        <YamlEditor key={base.metadata.resourceVersion} spec={spec} onSpec={(s) => (setResult(undefined), setSpec(s))} />
      ) : (
        <>
          <h3 class="mt-5 font-semibold">General</h3>
          <Text {...f} id="f-instructions" label="Instructions" path="spec.instructions" multiline />
          <h3 class="mt-5 font-semibold">Model and limits</h3>
          <Brain {...f} />
          <h3 class="mt-5 font-semibold">Permissions</h3>
          <Permissions {...f} table={table} saved={base.spec as Spec} />
          <h3 class="mt-5 font-semibold">Computer</h3>
          <ComputerFields {...f} />
        </>
      )}
      {rest.length > 0 && (
        <ul role="alert" class="mt-3 rounded-card border border-danger p-3 text-sm text-danger" data-testid="form-errors">
          {rest.map((c, i) => (
            <li key={i}>
              {c.field ? <code>{c.field}</code> : null} {c.message}
            </li>
          ))}
        </ul>
      )}
      <section aria-label="Review" class="mt-5 rounded-card border border-border bg-surface p-3">
        <h3 class="font-semibold">Review</h3>
        {changes.length === 0 ? (
          <p class="text-sm text-muted">No changes.</p>
        ) : (
          <ul class="mt-1 text-sm" data-testid="review">
            {changes.map((c) => (
              <li key={c.path.join('.')}>
                <code>{c.path.join('.')}</code>: {show(c.from)} → {show(c.to)}
              </li>
            ))}
          </ul>
        )}
        {!can('update', 'dots') && (
          <p class="mt-2 text-sm text-muted" data-testid="settings-read-only">
            You may look at these settings; changing them needs the editor role in namespace {ns}.
          </p>
        )}
        <div class={`mt-2 flex items-center gap-2 ${can('update', 'dots') ? '' : 'hidden'}`}>
          <button type="button" class={btn.primary} disabled={busy || !changes.length || causes.length > 0 || conflict} onClick={() => void save()}>
            Save {changes.length || ''} change{changes.length === 1 ? '' : 's'}
          </button>
          <button type="button" class={btn.quiet} disabled={!changes.length} onClick={() => (setSpec(structuredClone(base.spec) as Spec), setResult(undefined))}>
            Discard
          </button>
        </div>
        <p role="status" class="mt-1 min-h-5 text-sm text-ok">
          {saved}
        </p>
      </section>
      {can('delete', 'dots') && <DangerZone name={name} onDelete={remove} />}
    </div>
  );
}

function DangerZone({ name, onDelete }: { name: string; onDelete: (typed: string) => Promise<void> }) {
  const [typed, setTyped] = useState('');
  const [error, setError] = useState('');
  return (
    <section aria-labelledby="danger-h" class="mt-6 rounded-card border border-danger p-3">
      <h3 id="danger-h" class="font-semibold text-danger">
        Danger zone
      </h3>
      <p class="text-sm">Deleting {name} deletes its computer, its disk, its tasks and its log. It cannot be undone.</p>
      <label for="f-delete" class="mt-2 block text-sm">
        Type {name} to delete it
      </label>
      <div class="mt-1 flex flex-wrap gap-2">
        <input id="f-delete" class={input} value={typed} onInput={(e) => setTyped((e.target as HTMLInputElement).value)} autoComplete="off" />
        <button
          type="button"
          class={btn.dangerSolid}
          disabled={typed !== name}
          onClick={() => onDelete(typed).catch((e) => setError(`${(e as Error).message} Try again.`))}
        >
          Delete {name}
        </button>
      </div>
      {error && (
        <p role="alert" class="mt-1 text-sm text-danger">
          {error}
        </p>
      )}
    </section>
  );
}
