// pages/attach.js — the data plane's WebSocket attach protocol
// (internal/dataplane/ws.go): binary messages from the server are output
// (byte 0 the stream, bytes 1–8 the sequence number, then the bytes), text
// messages JSON control events (exit, gap, error, reconnect); the client
// sends stdin as binary messages and {"type":"resize"|"signal"|"eof"} as text.

// attach opens the WebSocket of a command session (the answer of POST
// …/commands or …/attachments). handlers: output(bytes Uint8Array, stream
// 1|2), event(obj), close(ev). Returns {sendInput(str|Uint8Array),
// resize(rows, cols), signal(name), eof(), close()}.
export function attach(session, handlers) {
  const base = session.websocket_url || '';
  if (!base) throw new Error('this server offers no WebSocket attach for the process');
  const url = `${base}${base.includes('?') ? '&' : '?'}token=${encodeURIComponent(session.attachment_token)}`;
  const ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  const enc = new TextEncoder();
  const pending = [];
  ws.addEventListener('open', () => {
    for (const m of pending.splice(0)) ws.send(m);
  });
  ws.addEventListener('message', (ev) => {
    if (ev.data instanceof ArrayBuffer) {
      const b = new Uint8Array(ev.data);
      if (b.length >= 9 && handlers.output) handlers.output(b.subarray(9), b[0]);
      return;
    }
    let msg;
    try { msg = JSON.parse(ev.data); } catch { return; }
    if (handlers.event) handlers.event(msg);
  });
  ws.addEventListener('close', (ev) => { if (handlers.close) handlers.close(ev); });
  const send = (m) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(m);
    else if (ws.readyState === WebSocket.CONNECTING) pending.push(m);
  };
  return {
    sendInput: (d) => send(typeof d === 'string' ? enc.encode(d) : d),
    resize: (rows, cols) => send(JSON.stringify({ type: 'resize', rows, cols })),
    signal: (name) => send(JSON.stringify({ type: 'signal', signal: name })),
    eof: () => send(JSON.stringify({ type: 'eof' })),
    close: () => { try { ws.close(1000); } catch { /* already closed */ } },
  };
}
