import { dotHref } from '../lib/router';
import { FrameView } from './FrameView';

/**
 * The computer beside the chat (ref 9.7): a column beside the thread from
 * 1024 px, a strip above it below that, and the same FrameView as the
 * Computer page's Screen view. The state is said once, by the frame or by
 * why there is none.
 */
export function ComputerPanel({ ns, name }: { ns: string; name: string }) {
  const open = (
    <a class="shrink-0 text-sm text-accent underline" href={dotHref(ns, name, 'computer')}>
      Open<span class="sr-only"> the Computer page</span>
    </a>
  );
  return (
    <aside
      aria-label={`${name}'s computer`}
      class="flex shrink-0 items-center gap-3 border-b border-border bg-surface px-4 py-2 lg:w-[26rem] lg:flex-col lg:items-stretch lg:gap-2 lg:overflow-y-auto lg:border-b-0 lg:border-l lg:py-4 xl:w-[32rem]"
      data-testid="computer-panel"
    >
      <div class="hidden items-center gap-2 lg:flex">
        <h2 class="text-sm font-medium">Computer</h2>
        <span class="ml-auto">{open}</span>
      </div>
      <div class="min-w-0 flex-1 lg:flex-none">
        <FrameView ns={ns} name={name} panel />
      </div>
      <span class="lg:hidden">{open}</span>
    </aside>
  );
}
