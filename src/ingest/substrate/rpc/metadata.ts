import { Codec, Src } from '@subsquid/scale-codec'
import { Runtime } from '@subsquid/substrate-runtime'
import type { Metadata, OldSpecsBundle, OldTypesBundle } from '@subsquid/substrate-runtime/lib/metadata/index.js'
import { types as metadataTypes } from '@subsquid/substrate-runtime/lib/metadata/old/definitions/metadata/index.js'
import { OldTypeRegistry } from '@subsquid/substrate-runtime/lib/metadata/old/typeRegistry.js'
import type { RpcClient, RuntimeVersionId } from '@subsquid/substrate-runtime/lib/runtime/interfaces.js'

/*
 * Runtime metadata as a node returns it (`state_getMetadata`: "meta" + version byte + body), for
 * @subsquid/substrate-runtime, which reads V9–V14. V15 (what Vara's runtimes return) has the same
 * type registry and the same pallet storage, calls, events, constants and errors as V14, plus pallet
 * docs, runtime APIs, outer enums and custom values: it is decoded here and handed over in the V14
 * shape. Any other version is refused with an error naming it.
 */

const MAGIC = 0x6174656d // "meta", little-endian

/** Metadata the decoder cannot read: names the version (and the runtime, when known). */
export class UnsupportedMetadata extends Error {
  constructor(readonly version: number, where: string) {
    super(`runtime metadata V${version}${where} is not supported: block-archive decodes metadata V9–V15`)
  }
}

/** V15's members over V14's (the layout of frame-metadata 16's `RuntimeMetadataV15`). */
const V15_TYPES = {
  MetadataV15: {
    lookup: 'PortableRegistryV14',
    pallets: 'Vec<PalletMetadataV15>',
    extrinsic: 'ExtrinsicMetadataV15',
    type: 'Si1LookupTypeId',
    apis: 'Vec<RuntimeApiMetadataV15>',
    outerEnums: 'OuterEnumsV15',
    custom: 'Vec<(Text, CustomValueMetadataV15)>',
  },
  PalletMetadataV15: {
    name: 'Text',
    storage: 'Option<PalletStorageMetadataV14>',
    calls: 'Option<PalletCallMetadataV14>',
    events: 'Option<PalletEventMetadataV14>',
    constants: 'Vec<PalletConstantMetadataV14>',
    errors: 'Option<PalletErrorMetadataV14>',
    index: 'u8',
    docs: 'Vec<Text>',
  },
  ExtrinsicMetadataV15: {
    version: 'u8',
    addressType: 'Si1LookupTypeId',
    callType: 'Si1LookupTypeId',
    signatureType: 'Si1LookupTypeId',
    extraType: 'Si1LookupTypeId',
    signedExtensions: 'Vec<SignedExtensionMetadataV14>',
  },
  RuntimeApiMetadataV15: { name: 'Text', methods: 'Vec<RuntimeApiMethodMetadataV15>', docs: 'Vec<Text>' },
  RuntimeApiMethodMetadataV15: { name: 'Text', inputs: 'Vec<RuntimeApiMethodParamMetadataV15>', output: 'Si1LookupTypeId', docs: 'Vec<Text>' },
  RuntimeApiMethodParamMetadataV15: { name: 'Text', type: 'Si1LookupTypeId' },
  OuterEnumsV15: { callType: 'Si1LookupTypeId', eventType: 'Si1LookupTypeId', errorType: 'Si1LookupTypeId' },
  CustomValueMetadataV15: { type: 'Si1LookupTypeId', value: 'Bytes' },
}

let v15: { codec: Codec; ti: number } | undefined

function v15Codec(): { codec: Codec; ti: number } {
  if (!v15) {
    const registry = new OldTypeRegistry({ types: { ...metadataTypes, ...V15_TYPES } } as any)
    const ti = registry.use('MetadataV15')
    v15 = { codec: new Codec(registry.getTypes()), ti }
  }
  return v15
}

function bytesOf(metadata: string | Uint8Array): Uint8Array {
  if (typeof metadata !== 'string') return metadata
  if (!/^0x([0-9a-fA-F]{2})*$/.test(metadata)) throw new Error('runtime metadata is not a 0x hex string')
  return Buffer.from(metadata.slice(2), 'hex')
}

/** The metadata version byte, checking the magic number. */
export function metadataVersion(metadata: string | Uint8Array): number {
  const bytes = bytesOf(metadata)
  if (bytes.length < 5 || new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true) !== MAGIC) {
    throw new Error('runtime metadata does not start with the magic number "meta"')
  }
  return bytes[4]
}

/**
 * Metadata in a form @subsquid/substrate-runtime reads: the bytes themselves for V9–V14, V15 decoded
 * and given in the V14 shape (the extrinsic type found by its path, as the V14 reader does).
 */
export function readableMetadata(metadata: string | Uint8Array, where = ''): string | Uint8Array | Metadata {
  const version = metadataVersion(metadata)
  if (version >= 9 && version <= 14) return metadata
  if (version !== 15) throw new UnsupportedMetadata(version, where)
  const { codec, ti } = v15Codec()
  const src = new Src(bytesOf(metadata).subarray(5))
  const m = codec.decode(ti, src) as any
  src.assertEOF()
  return {
    __kind: 'V14',
    value: {
      lookup: m.lookup,
      pallets: m.pallets.map(({ docs: _docs, ...p }: any) => p),
      extrinsic: { type: m.extrinsic.callType, version: m.extrinsic.version, signedExtensions: m.extrinsic.signedExtensions },
      type: m.type,
    },
  } as Metadata
}

/** A runtime for decoding, from a node's metadata of any version it can read (see `readableMetadata`). */
export function substrateRuntime(
  version: RuntimeVersionId,
  metadata: string | Uint8Array,
  typesBundle?: OldTypesBundle | OldSpecsBundle,
  rpc?: RpcClient,
): Runtime {
  return new Runtime(version, readableMetadata(metadata, ` of ${version.specName}@${version.specVersion}`), typesBundle, rpc)
}
