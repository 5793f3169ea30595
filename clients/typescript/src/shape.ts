// The format of the wire tables that scripts/gen_types.py writes into src/protocol.ts and
// src/wire.ts reads: its own module, so that the tables and their reader import it and
// neither imports the other's types.

/**
 * What a value holds that needs converting: 0 nothing (scalars, free JSON), a struct's name,
 * ["a", spec] a list of such values, ["m", spec] a map whose keys are data, ["u", names]
 * one of several structs, told apart by their tag.
 */
export type Spec = 0 | string | readonly ["a" | "m", Spec] | readonly ["u", readonly string[]];

export interface Shape {
  /** The field that tells a struct apart in a union, and its value. */
  tag?: readonly [string, string];
  /** Wire name -> [TypeScript name, what it holds, default filled in on reading]. */
  fields: Readonly<Record<string, readonly [string, Spec] | readonly [string, Spec, unknown]>>;
}
