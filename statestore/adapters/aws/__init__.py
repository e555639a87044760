"""AWS adapters for the ports in :mod:`statestore.store.ports`: DynamoDB for the log, snapshot records and the
table index; S3 for blobs. The only package that imports boto3; botocore errors never leave it."""
