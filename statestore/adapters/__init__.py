"""The ports implemented on real backends: AWS (DynamoDB, S3, SQS, Lambda) and PostgreSQL."""
