// SPDX-License-Identifier: Apache-2.0
// A small ADK-JS app driven by a scripted model (a real BaseLlm subclass returning
// canned responses; no network), and helpers to run and compare conversations.
import { BaseLlm, FunctionTool, LlmAgent, Runner } from '@google/adk';

/**
 * A model whose answer depends only on the request (so two runs answer alike): the
 * `reply` function maps the request's last content and its system instruction to parts.
 * Every system instruction it is given is recorded in `instructions`.
 */
export class ScriptedLlm extends BaseLlm {
  constructor(name, reply) {
    super({ model: `scripted-${name}` });
    this.reply = reply;
    this.instructions = [];
  }

  async *generateContentAsync(llmRequest) {
    const sys = llmRequest.config?.systemInstruction;
    const full = typeof sys === 'string' ? sys
      : (sys?.parts ?? []).map((p) => p.text ?? '').join('');
    // The agent's own instruction line (ADK adds its boilerplate around it).
    const instruction = full.split('\n').find((l) => /^(Guest|Write about) /.test(l)) ?? full;
    this.instructions.push(instruction);
    const last = llmRequest.contents[llmRequest.contents.length - 1];
    const parts = this.reply(last?.parts?.[0] ?? {}, instruction);
    yield {
      content: { role: 'model', parts },
      usageMetadata: { promptTokenCount: 11, candidatesTokenCount: 3, totalTokenCount: 14 },
      finishReason: 'STOP',
      modelVersion: this.model,
    };
  }

  async connect() {
    throw new Error('ScriptedLlm has no live mode');
  }
}

const OBJECT = (properties = {}, required = []) => ({ type: 'OBJECT', properties, required });

function call(name, args) {
  return [{ functionCall: { name, args } }];
}

function text(t) {
  return [{ text: t }];
}

/** The app: a concierge with two tools and a writer it can transfer to. */
export function buildAgents() {
  const remember = new FunctionTool({
    name: 'remember',
    description: 'Remember the guest and the topic.',
    parameters: OBJECT({ name: { type: 'STRING' }, topic: { type: 'STRING' } }, ['name', 'topic']),
    execute: ({ name, topic }, ctx) => {
      const visits = (ctx.state.get('app:visits') ?? 0) + 1;
      ctx.state.set('user:name', name);
      ctx.state.set('topic', topic);
      ctx.state.set('app:visits', visits);
      ctx.state.set('temp:scratch', `scratch-${visits}`);
      ctx.state.set(`app:seen_${ctx.invocationContext.session.id}`, true);
      return { ok: true, visits };
    },
  });
  const peek = new FunctionTool({
    name: 'peek_scratch',
    description: 'Read the scratch note of this turn.',
    parameters: OBJECT(),
    execute: (_args, ctx) => ({ scratch: ctx.state.get('temp:scratch') ?? null, turns: ctx.state.get('turns') ?? 0 }),
  });
  const count = new FunctionTool({
    name: 'count_turn',
    description: 'Count a turn.',
    parameters: OBJECT(),
    execute: (_args, ctx) => {
      const turns = (ctx.state.get('turns') ?? 0) + 1;
      ctx.state.set('turns', turns);
      ctx.state.set('temp:last_turn', turns);
      return { turns };
    },
  });

  const conciergeModel = new ScriptedLlm('concierge', (part, instruction) => {
    if (part.text !== undefined) {
      const words = part.text.split(' ');
      if (words[0] === 'remember') return call('remember', { name: words[1], topic: words[2] });
      if (words[0] === 'write') return call('transfer_to_agent', { agentName: 'writer' });
      return call('count_turn', {});
    }
    const fr = part.functionResponse;
    if (fr?.name === 'remember') return call('peek_scratch', {});
    if (fr?.name === 'peek_scratch') return text(`Noted (${fr.response.scratch}, ${fr.response.turns})`);
    if (fr?.name === 'count_turn') return text(`Turn ${fr.response.turns}`);
    return text('?');
  });
  const writerModel = new ScriptedLlm('writer', (part, instruction) =>
    text(`Draft ${instruction.length}`));

  const writer = new LlmAgent({
    name: 'writer',
    description: 'Writes drafts.',
    model: writerModel,
    instruction: 'Write about {topic} for {user:name}; earlier draft: {draft?}.',
    outputKey: 'draft',
  });
  const concierge = new LlmAgent({
    name: 'concierge',
    description: 'Greets and remembers.',
    model: conciergeModel,
    instruction: 'Guest {user:name?}; topic {topic}; last answer {last_answer?}; visits {app:visits?}.',
    tools: [remember, peek, count],
    outputKey: 'last_answer',
    subAgents: [writer],
  });
  return { agent: concierge, models: [conciergeModel, writerModel] };
}

export const TURNS = ['remember Ann Paris', 'hello', 'how are you', 'write', 'more please'];

/** Runs `turns` on a session through a real Runner; returns the events the runner yielded. */
export async function converse(runner, userId, sessionId, turns = TURNS) {
  const yielded = [];
  for (const t of turns) {
    for await (const event of runner.runAsync({ userId, sessionId, newMessage: { role: 'user', parts: [{ text: t }] } })) {
      yielded.push(event);
    }
  }
  return yielded;
}

export function makeRunner(sessionService, appName) {
  const { agent, models } = buildAgents();
  return { runner: new Runner({ appName, agent, sessionService }), models };
}

/**
 * A session as JSON with its random parts (event ids, invocation ids, function call ids,
 * timestamps) replaced by names in order of appearance, so runs can be compared.
 */
export function normalize(session) {
  const json = JSON.parse(JSON.stringify(session));
  const names = new Map();
  const name = (kind, v) => {
    if (!names.has(v)) names.set(v, `${kind}#${[...names.keys()].filter((k) => names.get(k).startsWith(kind)).length}`);
    return names.get(v);
  };
  for (const e of json.events ?? []) {
    e.id = name('event', e.id);
    e.invocationId = name('invocation', e.invocationId);
    for (const p of e.content?.parts ?? []) {
      if (p.functionCall?.id) p.functionCall.id = name('call', p.functionCall.id);
      if (p.functionResponse?.id) p.functionResponse.id = name('call', p.functionResponse.id);
    }
    if (e.longRunningToolIds) e.longRunningToolIds = e.longRunningToolIds.map((id) => name('call', id));
    e.timestamp = 'ts';
  }
  if ('lastUpdateTime' in json) json.lastUpdateTime = 'ts';
  return json;
}
