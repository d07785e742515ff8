// iceberg-js 1.0 through icecache: the ETag round trip in both snapshot modes, and tableExists.
// usage: node interop.mjs BASE_URL TOKEN NAMESPACE TABLE — prints one JSON object.
import { IcebergRestCatalog } from "iceberg-js";

const [baseUrl, token, namespace, name] = process.argv.slice(2);
const catalog = new IcebergRestCatalog({
  baseUrl,
  warehouse: "warehouse",
  auth: { type: "bearer", token },
});
const id = { namespace: [namespace], name };

const all = await catalog.loadTableResult(id);
const allAgain = await catalog.loadTableResult(id, { ifNoneMatch: all.etag });
const refs = await catalog.loadTableResult(id, { snapshots: "refs" });
const refsAgain = await catalog.loadTableResult(id, { snapshots: "refs", ifNoneMatch: refs.etag });
const refsWithAllTag = await catalog.loadTableResult(id, { snapshots: "refs", ifNoneMatch: all.etag });

console.log(JSON.stringify({
  all_etag: all.etag,
  all_uuid: all.metadata["table-uuid"],
  all_again_is_null: allAgain === null,
  refs_etag: refs.etag,
  refs_again_is_null: refsAgain === null,
  refs_with_all_tag_is_null: refsWithAllTag === null,
  exists: await catalog.tableExists(id),
  missing_exists: await catalog.tableExists({ namespace: [namespace], name: "no_such_table" }),
}));
