// Written by web/tables_test.go from guest/protocol (Permissions, Bounds, DestructivePermissions), the engine's tool table (ToolsOf), the Dots API (SpendEventTypes) the Task API (TaskPhase.Ended, DotLabel, RequestedByLabel) and the channels' names, warnings, states and error codes (ChannelKindNames, ChannelWarnings, ChannelState, wire.Code*); do not edit.
// UPDATE_WEB_TABLES=1 go test ./web writes it again.

export type Decision = 'allow' | 'ask' | 'deny';

export const PERMISSIONS: { name: string; label: string; description: string; risk: 'low' | 'medium' | 'high'; default: Decision; tools: string[] }[] = [
  {
    "name": "computer.exec",
    "label": "Run commands",
    "description": "Run shell commands on its computer as the dot user",
    "risk": "high",
    "default": "allow",
    "tools": [
      "exec",
      "exec_session",
      "list_exec_sessions"
    ]
  },
  {
    "name": "computer.screenshot",
    "label": "See the desktop",
    "description": "Take screenshots of its whole desktop",
    "risk": "low",
    "default": "allow",
    "tools": [
      "computer_screenshot"
    ]
  },
  {
    "name": "files.read",
    "label": "Read files",
    "description": "Read, list and search files in its home",
    "risk": "low",
    "default": "allow",
    "tools": [
      "find_files",
      "grep",
      "list_dir",
      "read_file"
    ]
  },
  {
    "name": "files.write",
    "label": "Write files",
    "description": "Create, edit and patch files in its home",
    "risk": "medium",
    "default": "allow",
    "tools": [
      "apply_patch",
      "edit_file",
      "write_file"
    ]
  },
  {
    "name": "automations",
    "label": "Schedule automations",
    "description": "Add, list and remove its own scheduled automations",
    "risk": "medium",
    "default": "ask",
    "tools": [
      "cron"
    ]
  },
  {
    "name": "browser.identity.list",
    "label": "List browser identities",
    "description": "List its browser identities and their status",
    "risk": "low",
    "default": "allow",
    "tools": [
      "browser_identity_list"
    ]
  },
  {
    "name": "browser.identity.create",
    "label": "Create browser identities",
    "description": "Make a new browser identity",
    "risk": "low",
    "default": "allow",
    "tools": [
      "browser_identity_create"
    ]
  },
  {
    "name": "browser.identity.delete",
    "label": "Delete browser identities",
    "description": "Delete a browser identity with its profile, cookies and logins",
    "risk": "high",
    "default": "ask",
    "tools": [
      "browser_identity_delete"
    ]
  },
  {
    "name": "browser.identity.launch",
    "label": "Open browsers",
    "description": "Open the browser of an identity",
    "risk": "low",
    "default": "allow",
    "tools": [
      "browser_identity_launch"
    ]
  },
  {
    "name": "browser.identity.close",
    "label": "Close browsers",
    "description": "Close the browser of an identity, keeping its profile",
    "risk": "low",
    "default": "allow",
    "tools": [
      "browser_identity_close"
    ]
  },
  {
    "name": "browser.navigate",
    "label": "Browse",
    "description": "Open http and https pages in a browser",
    "risk": "medium",
    "default": "allow",
    "tools": [
      "browser_navigate",
      "browser_navigate_back",
      "browser_tabs"
    ]
  },
  {
    "name": "browser.read",
    "label": "Read pages",
    "description": "Read the text, HTML and screenshots of open pages",
    "risk": "low",
    "default": "allow",
    "tools": [
      "browser_console_messages",
      "browser_network_request",
      "browser_network_requests",
      "browser_snapshot",
      "browser_take_screenshot",
      "browser_wait_for"
    ]
  },
  {
    "name": "browser.act",
    "label": "Act on pages",
    "description": "Click, type, choose options and upload files on pages",
    "risk": "high",
    "default": "allow",
    "tools": [
      "browser_click",
      "browser_drag",
      "browser_drop",
      "browser_evaluate",
      "browser_file_upload",
      "browser_fill_form",
      "browser_handle_dialog",
      "browser_hover",
      "browser_press_key",
      "browser_resize",
      "browser_select_option",
      "browser_type"
    ]
  },
  {
    "name": "mcp.servers.add",
    "label": "Add MCP servers",
    "description": "Add an MCP server to its own configuration",
    "risk": "high",
    "default": "ask",
    "tools": [
      "add_mcp_server"
    ]
  },
  {
    "name": "dots.delegate",
    "label": "Ask other Dots",
    "description": "Ask another Dot of its namespace to do a task, when both Dots' delegation settings allow it",
    "risk": "medium",
    "default": "ask",
    "tools": [
      "delegate_task"
    ]
  }
];

/** The permissions every call of which an approval card marks destructive; a file write is destructive outside WORKSPACE_DIR (guest/protocol DestructiveCall). */
export const DESTRUCTIVE_PERMISSIONS: readonly string[] = ["computer.exec","browser.identity.delete"];

/** The permissions an approval of which answers one question, in words: no "always" (guest/protocol OneTimePermissions, eventtext.PermissionPhrase). */
export const ONE_TIME_PERMISSIONS: Record<string, string> = {"limits.cost":"Spend more on this task","limits.spendPerDay":"Spend more today in this namespace"};
/** The permission of a namespace's question for more spend in a day (protocol.SpendPermission). */
export const SPEND_PERMISSION = "limits.spendPerDay";

/** Where the engine's relative paths start, and the Dot's home ("~"). */
export const WORKSPACE_DIR = "/home/dot/workspace";
export const DOT_HOME = "/home/dot";

export const BOUNDS = {
  "cpu": {
    "default": 2,
    "max": 16,
    "min": 1
  },
  "diskGiB": {
    "default": 40,
    "max": 1024,
    "min": 20
  },
  "idleTimeoutMin": 15,
  "maxCostPerTaskUSD": {
    "default": 1,
    "max": 100,
    "min": 0.01
  },
  "maxStepsPerTask": {
    "default": 60,
    "max": 1000,
    "min": 1
  },
  "memoryGiB": {
    "default": 4,
    "max": 64,
    "min": 2
  }
} as const;

/** The events whose spent_usd the usage route sums: a Dot's spend changes on these only. */
export const SPEND_EVENT_TYPES: readonly string[] = ["task.completed","task.failed","message.assistant","memory.updated"];

/** The phases in which a task has ended: nothing leads out of them (api/v1alpha1 TaskPhase.Ended). */
export const ENDED_TASK_PHASES = ["COMPLETED","FAILED","CANCELLED"] as const;

export type EndedTaskPhase = (typeof ENDED_TASK_PHASES)[number];

/** The label every Task carries with its Dot's name, and the one a delegated Task carries with the asker's: a Dot's tasks, or its requests, are listed by selector (api/v1alpha1 DotLabel, RequestedByLabel). */
export const DOT_LABEL = "dots.invisible.dev/dot";
export const REQUESTED_BY_LABEL = "dots.invisible.dev/requested-by";

/** How each messaging channel is named to people (wire.ChannelKindNames). */
export const CHANNEL_NAMES: Record<string, string> = {"telegram":"Telegram","whatsapp":"WhatsApp"};

/** What a person is told where they link a channel of each kind (wire.ChannelWarnings). */
export const CHANNEL_WARNINGS: Record<string, string> = {"telegram":"Telegram chats are not end-to-end encrypted: Telegram can read what you and the Dot write there.","whatsapp":"This is not an official way to use WhatsApp. It links the Dot as a device of a personal account, which WhatsApp's terms do not allow for automation, and WhatsApp can restrict or ban the number. Use a number of its own (a spare SIM or eSIM), never the one you live on. WhatsApp and the account's other devices see what the Dot writes."};

/** Where a Channel's link can stand (api/v1alpha1 ChannelState). */
export const CHANNEL_STATES = ["connecting","connected","needs_relink","error","paused"] as const;

export type ChannelState = (typeof CHANNEL_STATES)[number];

/** The error codes of the channel routes (internal/dotsapi/wire). */
export const CHANNEL_ERROR_CODES = ["invalid_credentials","channel_unreachable","account_in_use","already_exists","channel_off"] as const;

export type ChannelErrorCode = (typeof CHANNEL_ERROR_CODES)[number];
