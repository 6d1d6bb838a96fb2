// FakeWhatsAppProgram: a fake of the opt-in WhatsApp program
// (invisible-dots-whatsapp) at the edge of the WhatsApp tests, because
// WhatsApp itself cannot be reached or faked. The real server launches it
// (INVISIBLE_DOTS_WHATSAPP=1, INVISIBLE_DOTS_WHATSAPP_PROGRAM) and speaks
// the channel protocol to it over its socket (docs/channel-port.md, version
// 1): the fake answers hello with welcome, shows a new link code every
// second until the test says the phone scanned one, then saves the device's
// keys through the server, says linked and connected, and hands the server
// the messages the test makes a person send. The test steers it through
// files in a directory of its own (FAKE_WHATSAPP_DIR): `scan`, `logout`
// (the device removed on the phone), and `say-*.json` ({peer, label, text}).
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The number the fake phone links. */
export const FAKE_NUMBER = { id: '15551234567', name: '+15551234567' };

// The program itself: plain JavaScript node runs as it is.
const PROGRAM = String.raw`#!/usr/bin/env node
const net = require('node:net');
const fs = require('node:fs');
const path = require('node:path');
const socket = process.argv[process.argv.indexOf('--socket') + 1];
const dir = process.env.FAKE_WHATSAPP_DIR;
const NUMBER = ${JSON.stringify(FAKE_NUMBER)};
try { fs.unlinkSync(socket); } catch {}
const server = net.createServer((conn) => {
  let buf = '';
  let ids = 0;
  let timer;
  let codes = 0;
  const write = (f) => conn.write(JSON.stringify(f) + '\n');
  const end = () => clearInterval(timer);
  conn.on('close', end);
  conn.on('error', end);
  const connected = () => {
    write({ type: 'connected', account: NUMBER });
    timer = setInterval(() => {
      if (fs.existsSync(path.join(dir, 'logout'))) {
        fs.unlinkSync(path.join(dir, 'logout'));
        clearInterval(timer);
        write({ type: 'closed', reason: 'logged_out' });
        return;
      }
      for (const f of fs.readdirSync(dir).filter((n) => n.startsWith('say-'))) {
        const m = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
        fs.unlinkSync(path.join(dir, f));
        write({ type: 'message', id: ++ids, message: { peer: m.peer, label: m.label, chat: m.peer + '@s.whatsapp.net', external_id: NUMBER.id + ':' + f, text: m.text, has_text: true } });
      }
    }, 200);
  };
  conn.on('data', (chunk) => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const f = JSON.parse(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      if (f.type === 'hello') {
        write({ type: 'welcome', v: 1 });
        if (f.keys && Object.keys(f.keys).length) { connected(); continue; }
        // A new device: a code every second until the phone scans one.
        write({ type: 'code', code: '2@fake-link-code-' + ++codes });
        timer = setInterval(() => {
          if (fs.existsSync(path.join(dir, 'scan'))) {
            clearInterval(timer);
            fs.unlinkSync(path.join(dir, 'scan'));
            write({ type: 'keys', id: ++ids, changes: [{ group: 'device', key: 'id', value: Buffer.from('fake-device').toString('base64') }] });
            return;
          }
          write({ type: 'code', code: '2@fake-link-code-' + ++codes });
        }, 1000);
      } else if (f.type === 'ack' && f.id === 1 && codes) {
        write({ type: 'linked', account: NUMBER });
        connected();
      } else if (f.type === 'send' || f.type === 'edit' || f.type === 'typing') {
        write({ type: 'result', id: f.id, ref: 'fake-message-' + f.id });
      } else if (f.type === 'drop') {
        write({ type: 'closed', reason: 'failed' });
        conn.end();
      }
    }
  });
});
server.listen(socket);
process.on('SIGTERM', () => process.exit(0));
`;

export interface FakeWhatsAppProgram {
  /** The program to give the server (INVISIBLE_DOTS_WHATSAPP_PROGRAM). */
  program: string;
  /** The directory the test steers it through (FAKE_WHATSAPP_DIR). */
  dir: string;
  /** The phone scans the code on show. */
  scan(): void;
  /** The device is removed on the phone: the session ends, logged out. */
  logout(): void;
  /** A person writes to the linked number. */
  personSays(m: { peer: string; label: string; text: string }): void;
}

export function fakeWhatsAppProgram(): FakeWhatsAppProgram {
  const root = mkdtempSync(join(tmpdir(), 'fake-whatsapp-'));
  const dir = join(root, 'control');
  mkdirSync(dir);
  const program = join(root, 'invisible-dots-whatsapp');
  writeFileSync(program, PROGRAM);
  chmodSync(program, 0o755);
  let said = 0;
  return {
    program,
    dir,
    scan: () => writeFileSync(join(dir, 'scan'), ''),
    logout: () => writeFileSync(join(dir, 'logout'), ''),
    personSays: (m) => writeFileSync(join(dir, `say-${++said}.json`), JSON.stringify(m)),
  };
}
