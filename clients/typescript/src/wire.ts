// camelCase in TypeScript, snake_case on the wire: bodies are converted by the generated
// tables of src/protocol.ts, never by renaming every key, so that the keys of free JSON
// (`metadata`, `preferences`, capture `args`) and of maps (`by_type`, `changes`) stay as given.

import { SHAPES } from "./protocol.js";
import type { Shape, Spec } from "./shape.js";

type Obj = Record<string, unknown>;

const byCamel = new Map<string, Map<string, readonly [string, Spec]>>();

function camelIndex(name: string): Map<string, readonly [string, Spec]> {
  let index = byCamel.get(name);
  if (index === undefined) {
    index = new Map();
    for (const [wire, field] of Object.entries(shapeOf(name).fields)) {
      index.set(field[0], [wire, field[1]]);
    }
    byCamel.set(name, index);
  }
  return index;
}

function shapeOf(name: string): Shape {
  const shape = SHAPES[name];
  if (shape === undefined) throw new Error(`no wire shape for ${name}`);
  return shape;
}

function isObj(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/** A field the tables do not know (a newer server's): its name in camelCase. */
export function camel(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** A field the tables do not know: its wire name, so that the server can name it. */
export function snake(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function pick(value: Obj, names: readonly string[], wire: boolean): string {
  for (const name of names) {
    const tag = shapeOf(name).tag;
    if (tag === undefined) continue;
    const key = wire ? tag[0] : (shapeOf(name).fields[tag[0]]?.[0] ?? tag[0]);
    if (value[key] === tag[1]) return name;
  }
  return names[0]!;
}

/** A reply, record or event as read from the wire, in TypeScript's names, with defaults. */
export function fromWire(value: unknown, spec: Spec): unknown {
  if (spec === 0 || value === null || typeof value !== "object") return value;
  if (typeof spec === "string") return isObj(value) ? structFromWire(value, spec) : value;
  const [kind, inner] = spec;
  if (kind === "a") return Array.isArray(value) ? value.map((v) => fromWire(v, inner as Spec)) : value;
  if (!isObj(value)) return value;
  if (kind === "m") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fromWire(v, inner as Spec)]));
  }
  return structFromWire(value, pick(value, inner as readonly string[], true));
}

function structFromWire(value: Obj, name: string): Obj {
  const { fields } = shapeOf(name);
  const out: Obj = {};
  for (const [key, v] of Object.entries(value)) {
    const field = fields[key];
    if (field === undefined) out[camel(key)] = v;
    else out[field[0]] = fromWire(v, field[1]);
  }
  for (const field of Object.values(fields)) {
    if (field.length === 3 && !(field[0] in out)) out[field[0]] = structuredClone(field[2]);
  }
  return out;
}

/** A request in TypeScript's names as the wire wants it; `undefined` fields are left out. */
export function toWire(value: unknown, spec: Spec): unknown {
  if (value instanceof Date) return value.toISOString();
  if (spec === 0 || value === null || typeof value !== "object") return value;
  if (typeof spec === "string") return isObj(value) ? structToWire(value, spec) : value;
  const [kind, inner] = spec;
  if (kind === "a") return Array.isArray(value) ? value.map((v) => toWire(v, inner as Spec)) : value;
  if (!isObj(value)) return value;
  if (kind === "m") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toWire(v, inner as Spec)]));
  }
  return structToWire(value, pick(value, inner as readonly string[], false));
}

function structToWire(value: Obj, name: string): Obj {
  const index = camelIndex(name);
  const out: Obj = {};
  for (const [key, v] of Object.entries(value)) {
    if (v === undefined) continue;
    const field = index.get(key);
    // An unknown field goes as its snake_case name: requests are strict, so the server
    // answers `invalid_request` naming it (with a "did you mean").
    if (field === undefined) out[snake(key)] = v instanceof Date ? v.toISOString() : v;
    else out[field[0]] = toWire(v, field[1]);
  }
  return out;
}
