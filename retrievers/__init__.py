"""mk.retrievers"""
