/** Another ingest process holds the dataset (its folder lock or its object-storage lease). */
export class DatasetLocked extends Error {}

/** An S3 ingest found its lease taken over or expired: it stops before publishing another chunk. */
export class LeaseLost extends DatasetLocked {}
