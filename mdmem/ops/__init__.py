"""Operations behind the MemoryRepo facade."""
