// Parse an AsyncAPI document with the official parser (@asyncapi/parser) and exit non-zero,
// printing each diagnostic of severity error, when it is not valid. Warnings are printed too.
//   node scripts/validate-asyncapi.mjs ../../docs/asyncapi.yaml
import { readFile } from "node:fs/promises";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const path = process.argv[2];
if (!path) {
  console.error("usage: node scripts/validate-asyncapi.mjs <asyncapi.yaml>");
  process.exit(2);
}
const parser = new Parser();
const { document, diagnostics } = await parser.parse(await readFile(path, "utf8"), { source: path });
const where = (d) => `${d.path.join("/") || "(document)"}${d.range ? ` line ${d.range.start.line + 1}` : ""}`;
const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
for (const d of diagnostics.filter((d) => d.severity === DiagnosticSeverity.Warning)) {
  console.log(`warning ${d.code}: ${d.message} at ${where(d)}`);
}
for (const d of errors) {
  console.error(`error ${d.code}: ${d.message} at ${where(d)}`);
}
if (errors.length > 0 || document === undefined) {
  console.error(`${path}: not a valid AsyncAPI document (${errors.length} errors)`);
  process.exit(1);
}
console.log(
  `${path}: valid AsyncAPI ${document.version()}: ${document.channels().length} channels,` +
    ` ${document.operations().length} operations, ${document.components().schemas().length} schemas`,
);
