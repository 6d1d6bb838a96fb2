// The resources' fields the pages read (api/v1alpha1) and the Dots API's
// shapes (internal/dotsapi/wire).
import type { ChannelState } from './generated';

export interface Meta {
  name: string;
  generation?: number;
  namespace?: string;
  uid: string;
  resourceVersion: string;
  creationTimestamp?: string;
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
}

export interface Dot {
  metadata: Meta;
  spec: { model?: { provider?: string; id?: string }; instructions?: string };
  status?: {
    phase?: string;
    agentState?: string;
    currentTask?: string;
    pendingApprovals?: number;
    lastActivityTime?: string;
    error?: string;
    conditions?: Condition[];
  };
}

export interface Computer {
  metadata: Meta & { annotations?: Record<string, string> };
  spec: { runStrategy?: string; nodeName?: string; cpu?: number; memory?: string; disk?: string };
  status?: {
    state?: string;
    stopReason?: string;
    conditions?: Condition[];
    goldenImage?: string;
    runtimeImage?: string;
    nextAutomationTime?: string;
    startFailure?: { consecutiveFailCount: number; retryAfter?: string; message?: string };
    system?: { hostname?: string; cpus?: number; memTotalBytes?: number; memAvailableBytes?: number; diskTotalBytes?: number; diskFreeBytes?: number };
  };
}

export type TaskPhase = 'PENDING' | 'RUNNING' | 'WAITING_APPROVAL' | 'COMPLETED' | 'FAILED' | 'CANCELLED';

export interface Task {
  metadata: Meta;
  spec: {
    dotName: string;
    description: string;
    priority?: number;
    scheduledAt?: string;
    cancelRequested?: boolean;
    /** The Dot that asked for the task (delegate_task), the task it asked in, and how deep the request is. */
    requestedBy?: { dot: string; task?: string; depth: number };
  };
  status?: {
    phase?: TaskPhase;
    runs?: { number: number; started?: string; delivered?: string; finished?: string; outcome?: string }[];
    /** When the task was first given to its Dot (its first run): the time in the queue is not counted. */
    startTime?: string;
    /** When the task ended (COMPLETED, FAILED or CANCELLED). */
    completionTime?: string;
    summary?: string;
    error?: string;
    spentUSD?: number;
    /** The spend of the tasks this task asked other Dots for, theirs included. */
    delegatedSpentUSD?: number;
    progress?: string;
  };
}

/** An event of the activity route: the event, its words (internal/eventtext) and its family. */
export interface ActivityEvent extends LogEvent {
  text: string;
  family: string;
}

export interface ActivityFamily {
  name: string;
  types: string[];
}

export interface Approval {
  metadata: Meta;
  spec: {
    dotName: string;
    requestID?: string;
    taskName?: string;
    tool: string;
    permission: string;
    arguments?: unknown;
    reason?: string;
    decision?: 'approve' | 'reject';
    note?: string;
    always?: boolean;
    /** Bounds an always: '1h' or 'endOfDay'; absent is for ever. */
    alwaysFor?: '1h' | 'endOfDay';
    /** 'task': allowed for the rest of the task (an approval asked because of untrusted input). */
    scope?: 'task';
    /** What the Dot read that made the call asked (untrusted input). */
    taint?: { kind: string; source: string };
  };
  status?: { phase?: string; decidedAt?: string };
}


export interface Message {
  event_id: number;
  role: 'user' | 'assistant';
  /** The messaging channel a person's message came through (telegram); absent for the web and the command line. */
  via?: string;
  text: string;
  message_id?: string;
  in_reply_to?: string;
  spent_usd?: number;
  created_at: string;
}

export interface LogEvent {
  id: number;
  type: string;
  source: 'host' | 'guest';
  data: any;
  created_at: string;
  // Set on the stream's events.
  namespace?: string;
  dot?: string;
  dot_uid?: string;
}

export const key = (m: { namespace?: string; name: string }) => `${m.namespace ?? ''}/${m.name}`;

/** One skill of a Dot, as the engine lists it (guest/protocol Skill). */
export interface Skill {
  name: string;
  description: string;
  source: 'builtin' | 'dot' | string;
  path: string;
  content: string;
}

/**
 * When the task started: status.startTime, which the controllers derive
 * from the log (its first run). Never its creation, which counts the time
 * it waited in the queue; undefined until it was given to its Dot.
 */
export const taskStarted = (t: Task): string | undefined => t.status?.startTime ?? t.status?.runs?.[0]?.started;

/**
 * When the task ended: status.completionTime, which the controllers write
 * for every ended task, run or not. Until they have, a moment after the
 * end, its last run's end or its creation stands in, so it still has a
 * place in the History.
 */
export const taskEnded = (t: Task): string | undefined =>
  t.status?.completionTime ?? t.status?.runs?.at(-1)?.finished ?? t.metadata.creationTimestamp;

/** A person paired with a Channel (api/v1alpha1 ChannelPerson). */
export interface ChannelPerson {
  /** Their stable id on the service (a Telegram user id). */
  id: string;
  label?: string;
  role: string;
  pairedAt: string;
}

/** A Dot's link to Telegram or WhatsApp (api/v1alpha1 Channel). */
export interface Channel {
  metadata: Meta & { deletionTimestamp?: string };
  spec: {
    dotName: string;
    type: 'telegram' | 'whatsapp' | string;
    enabled?: boolean;
    credentialsSecretName?: string;
    settings?: { approvals?: boolean; notifyTasks?: boolean; showArguments?: boolean };
  };
  status?: {
    state?: ChannelState;
    detail?: string;
    account?: { id: string; name?: string };
    people?: ChannelPerson[];
    conditions?: Condition[];
  };
}

/** A Dot's signed door that makes Tasks (api/v1alpha1 Webhook). */
export interface Webhook {
  metadata: Meta;
  spec: {
    dotName: string;
    signature: 'github' | 'standard' | 'token' | string;
    secretRef: { name: string; key?: string };
    task: { description: string; priority?: number };
    paused?: boolean;
  };
  status?: {
    lastDeliveryTime?: string;
    lastTaskName?: string;
    accepted?: number;
    duplicates?: number;
    refused?: number;
    lastError?: string;
    lastErrorTime?: string;
  };
}

/** A channel type the server runs (wire.ChannelKind). */
export interface ChannelKind {
  type: string;
  name: string;
  linked_by: 'token' | 'code' | string;
}

/** A one-time pairing code (wire.PairingCode). */
export interface PairingCode {
  code: string;
  expires_at: string;
  /** What the person sends the bot: "/start CODE". */
  words: string;
  /** Opens the chat with the words ready to send; empty while the bot's name is not known. */
  link?: string;
}

/** The answer of an add or a new token (wire.ChannelLinked). */
export interface ChannelLinked {
  namespace: string;
  name: string;
  type: string;
  account: { id: string; name?: string };
}

/** One frame of a WhatsApp link's stream (wire.ChannelLinkFrame). */
export interface ChannelLinkFrame {
  code?: string;
  linked?: string;
  failed?: string;
}
