"""The local application: the runtime that runs the whole system on emulators (DynamoDB Local, a moto
server), and the demos. An application on top of the library (and of ``lambdas`` and ``spark_client``):
the library never imports it.
"""
