"""The ground every stage stands on: config schemas, the registry, errors, files, checksums, the device."""
