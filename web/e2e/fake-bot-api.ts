// FakeBotApi: a fake of Telegram's Bot API at the edge of the channel tests.
// The real server's Telegram adapter is pointed at it with
// INVISIBLE_DOTS_TELEGRAM_API; it answers the calls the adapter makes
// (getMe, deleteWebhook, getUpdates as a long poll, sendMessage,
// sendChatAction, editMessageText, answerCallbackQuery) for the bots it
// knows, refuses every other token as Telegram does (401 Unauthorized), and
// hands out the messages a test makes a person send.
import { createServer, type IncomingMessage, type Server } from 'node:http';

export interface FakeBot {
  id: number;
  username: string;
}

interface Update {
  update_id: number;
  message: {
    message_id: number;
    date: number;
    chat: { id: number; type: 'private'; first_name: string };
    from: { id: number; is_bot: false; first_name: string };
    text: string;
  };
}

const json = (body: unknown) => JSON.stringify(body);
const UNAUTHORIZED = json({ ok: false, error_code: 401, description: 'Unauthorized' });

/** The parameters of a Bot API call: the query, a JSON body or a form's fields. */
function params(req: IncomingMessage, body: string): Record<string, string> {
  const out: Record<string, string> = Object.fromEntries(new URL(req.url ?? '/', 'http://fake').searchParams);
  const type = req.headers['content-type'] ?? '';
  if (type.includes('application/json') && body) {
    for (const [k, v] of Object.entries(JSON.parse(body) as Record<string, unknown>)) out[k] = typeof v === 'string' ? v : JSON.stringify(v);
  } else if (type.includes('application/x-www-form-urlencoded')) {
    for (const [k, v] of new URLSearchParams(body)) out[k] = v;
  } else if (type.includes('multipart/form-data')) {
    for (const m of body.matchAll(/name="([^"]+)"\r\n(?:[^\r\n]+\r\n)*\r\n([\s\S]*?)\r\n--/g)) out[m[1]] = m[2];
  }
  return out;
}

export class FakeBotApi {
  url = '';
  /** The calls made, by method, with their parameters (never the token). */
  calls: { method: string; bot: number; params: Record<string, string> }[] = [];
  private server: Server;
  private tokens = new Map<string, FakeBot>();
  private revoked = new Set<string>();
  private updates: Update[] = [];
  private nextUpdate = 1000;
  private unreachable = new Set<string>();

  private constructor() {
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => void this.answer(req, body, res));
    });
  }

  static async start(): Promise<FakeBotApi> {
    const f = new FakeBotApi();
    await new Promise<void>((resolve) => f.server.listen(0, '127.0.0.1', resolve));
    f.url = `http://127.0.0.1:${(f.server.address() as { port: number }).port}`;
    return f;
  }

  /** A token Telegram knows, of the bot given. */
  knows(token: string, bot: FakeBot) {
    this.tokens.set(token, bot);
  }

  /** The token is revoked in @BotFather: every call with it is refused from now on. */
  revoke(token: string) {
    this.revoked.add(token);
  }

  /** Calls with this token find no Telegram: the connection is dropped unanswered. */
  dropsCallsOf(token: string) {
    this.unreachable.add(token);
  }

  /** A person writes to the bot in their private chat. */
  personSays(from: { id: number; first_name: string }, text: string) {
    this.updates.push({
      update_id: this.nextUpdate++,
      message: {
        message_id: this.nextUpdate,
        date: Math.floor(Date.now() / 1000),
        chat: { id: from.id, type: 'private', first_name: from.first_name },
        from: { id: from.id, is_bot: false, first_name: from.first_name },
        text,
      },
    });
  }

  /** The calls of a method. */
  made(method: string) {
    return this.calls.filter((c) => c.method === method);
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async answer(req: IncomingMessage, body: string, res: import('node:http').ServerResponse) {
    const m = /^\/bot([^/]+)\/(\w+)/.exec(new URL(req.url ?? '/', 'http://fake').pathname);
    const send = (status: number, text: string) => {
      if (res.writableEnded) return;
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(text);
    };
    if (!m) return send(404, json({ ok: false, error_code: 404, description: 'Not Found' }));
    const [, token, method] = [m[0], decodeURIComponent(m[1]), m[2]];
    if (this.unreachable.has(token)) return req.socket.destroy();
    const bot = this.tokens.get(token);
    if (!bot || this.revoked.has(token)) return send(401, UNAUTHORIZED);
    const p = params(req, body);
    this.calls.push({ method, bot: bot.id, params: p });
    const ok = (result: unknown) => send(200, json({ ok: true, result }));
    switch (method) {
      case 'getMe':
        return ok({ id: bot.id, is_bot: true, first_name: 'Fake bot', username: bot.username });
      case 'deleteWebhook':
        return ok(true);
      case 'getUpdates': {
        const offset = Number(p.offset ?? 0);
        // An offset confirms every update before it: Telegram forgets them.
        if (offset > 0) this.updates = this.updates.filter((u) => u.update_id >= offset);
        const waiting = () => this.updates.filter((u) => u.update_id >= offset);
        // A long poll: the news at once, or an empty answer after a second.
        for (let i = 0; i < 10 && !waiting().length && !this.revoked.has(token); i++) await new Promise((r) => setTimeout(r, 100));
        if (this.revoked.has(token)) return send(401, UNAUTHORIZED);
        return ok(waiting());
      }
      case 'sendMessage':
      case 'editMessageText':
        return ok({
          message_id: this.nextUpdate++,
          date: Math.floor(Date.now() / 1000),
          chat: { id: Number(p.chat_id ?? 0), type: 'private' },
          text: p.text ?? '',
        });
      case 'sendChatAction':
      case 'answerCallbackQuery':
        return ok(true);
      default:
        return send(404, json({ ok: false, error_code: 404, description: 'Not Found: method not found' }));
    }
  }
}
