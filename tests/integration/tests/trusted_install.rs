//! The extension is trusted: a database owner who is not a superuser can
//! install it, define limits, and grant an application role the right to
//! use them; that role still has no access to the tables.

use postgres::{Client, NoTls};

fn connect_as(user: &str, database: &str) -> Client {
    let base = std::env::var("RATE_LIMITER_TEST_URL")
        .expect("RATE_LIMITER_TEST_URL is not set: run the tests through scripts/test.sh");
    Client::connect(&format!("{base} user={user} dbname={database}"), NoTls)
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
}

#[test]
fn a_database_owner_who_is_not_superuser_can_install_and_grant_it() {
    let mut admin = connect_as("postgres", "postgres");
    // One statement per call: DROP DATABASE cannot run in the implicit
    // transaction of a multi-statement message.
    for sql in [
        "DROP DATABASE IF EXISTS rate_limiter_trusted",
        "DROP ROLE IF EXISTS rate_limiter_owner",
        "DROP ROLE IF EXISTS rate_limiter_app",
        "CREATE ROLE rate_limiter_owner LOGIN",
        "CREATE ROLE rate_limiter_app LOGIN",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    admin
        .batch_execute("CREATE DATABASE rate_limiter_trusted OWNER rate_limiter_owner")
        .unwrap();

    let mut owner = connect_as("rate_limiter_owner", "rate_limiter_trusted");
    let superuser: bool = owner
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!superuser);
    owner
        .batch_execute(
            "CREATE EXTENSION rate_limiter;
             SELECT rate_limiter.define('signup', rate_limiter.token_bucket(1, '1 hour'));
             GRANT USAGE ON SCHEMA rate_limiter TO rate_limiter_app;
             GRANT EXECUTE ON FUNCTION
                 rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config)
             TO rate_limiter_app;",
        )
        .expect("a database owner installs the extension and grants it");

    let mut app = connect_as("rate_limiter_app", "rate_limiter_trusted");
    let sql = "SELECT ok FROM rate_limiter.rate_limit('signup', 'k')";
    assert!(app.query_one(sql, &[]).unwrap().get::<_, bool>(0));
    assert!(
        !app.query_one(sql, &[]).unwrap().get::<_, bool>(0),
        "the second call in the hour is refused"
    );
    for denied in [
        "SELECT * FROM rate_limiter.rate_limits",
        "SELECT rate_limiter.rate_reset('signup', 'k')",
    ] {
        let error = app.query(denied, &[]).unwrap_err();
        assert_eq!(
            error.code(),
            Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{denied}"
        );
    }

    drop((owner, app));
    for sql in [
        "DROP DATABASE rate_limiter_trusted WITH (FORCE)",
        "DROP ROLE rate_limiter_owner",
        "DROP ROLE rate_limiter_app",
    ] {
        admin.batch_execute(sql).unwrap();
    }
}

/// Whether `role` holds any privilege on the extension's functions, tables,
/// types or schema (owners aside).
fn privileges_of(client: &mut Client, role: &str) -> Vec<String> {
    client
        .query(
            "SELECT what FROM (
                 SELECT 'function ' || p.oid::regprocedure::text AS what, (aclexplode(p.proacl)).grantee
                 FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace
                 UNION ALL
                 SELECT 'table ' || c.oid::regclass::text, (aclexplode(c.relacl)).grantee
                 FROM pg_class c WHERE c.relnamespace = 'rate_limiter'::regnamespace
                 UNION ALL
                 SELECT 'type ' || t.oid::regtype::text, (aclexplode(t.typacl)).grantee
                 FROM pg_type t WHERE t.typnamespace = 'rate_limiter'::regnamespace
                 UNION ALL
                 SELECT 'schema rate_limiter', (aclexplode(n.nspacl)).grantee
                 FROM pg_namespace n WHERE n.nspname = 'rate_limiter'
             ) AS granted
             WHERE grantee = (SELECT oid FROM pg_roles WHERE rolname = $1)
             ORDER BY what",
            &[&role],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// `ALTER DEFAULT PRIVILEGES` would hand a role EXECUTE on every function
/// the extension creates (rate_reset included) and USAGE on its schema:
/// after CREATE EXTENSION, and after an update from 0.1.0 (whose scripts
/// created objects under those defaults), that role holds nothing.
#[test]
fn default_privileges_grant_nothing_after_install_or_update() {
    let mut admin = connect_as("postgres", "postgres");
    for sql in [
        "DROP DATABASE IF EXISTS rate_limiter_defaults",
        "DROP ROLE IF EXISTS rate_limiter_web",
        "CREATE ROLE rate_limiter_web LOGIN",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    for version in ["", " VERSION '0.1.0'"] {
        admin
            .batch_execute("DROP DATABASE IF EXISTS rate_limiter_defaults")
            .unwrap();
        admin
            .batch_execute("CREATE DATABASE rate_limiter_defaults")
            .unwrap();
        let mut client = connect_as("postgres", "rate_limiter_defaults");
        client
            .batch_execute(
                "ALTER DEFAULT PRIVILEGES FOR ROLE postgres GRANT EXECUTE ON FUNCTIONS TO rate_limiter_web;
                 ALTER DEFAULT PRIVILEGES FOR ROLE postgres GRANT USAGE ON SCHEMAS TO rate_limiter_web;
                 ALTER DEFAULT PRIVILEGES FOR ROLE postgres GRANT ALL ON TABLES TO rate_limiter_web;
                 ALTER DEFAULT PRIVILEGES FOR ROLE postgres GRANT USAGE ON TYPES TO rate_limiter_web;",
            )
            .unwrap();
        client
            .batch_execute(&format!("CREATE EXTENSION rate_limiter{version}"))
            .unwrap();
        if !version.is_empty() {
            // The old scripts do hand out the defaults...
            assert!(!privileges_of(&mut client, "rate_limiter_web").is_empty());
            client
                .batch_execute("ALTER EXTENSION rate_limiter UPDATE")
                .unwrap();
        }
        let held = privileges_of(&mut client, "rate_limiter_web");
        assert!(
            held.is_empty(),
            "after CREATE EXTENSION{version} (and update): {held:?}"
        );
        drop(client);
        let mut web = connect_as("rate_limiter_web", "rate_limiter_defaults");
        let error = web
            .query("SELECT rate_limiter.rate_reset('any', 'k')", &[])
            .unwrap_err();
        assert_eq!(
            error.code(),
            Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
        );
    }
    for sql in [
        "DROP DATABASE rate_limiter_defaults WITH (FORCE)",
        "DROP ROLE rate_limiter_web",
    ] {
        admin.batch_execute(sql).unwrap();
    }
}

/// In a trusted install the schema belongs to the installing database
/// owner, who can create objects in it; the functions' own statements run
/// as the extension's owner (the bootstrap superuser) with the search path
/// `pg_catalog, pg_temp`, so nothing planted there runs as that owner:
/// an operator `=` on text and functions named like ones SQL calls
/// (`lower`, `count`) each log their caller if they ever run.
#[test]
fn objects_planted_in_the_schema_never_run_as_the_owner() {
    let mut admin = connect_as("postgres", "postgres");
    for sql in [
        "DROP DATABASE IF EXISTS rate_limiter_planted",
        "DROP ROLE IF EXISTS rate_limiter_planter",
        "CREATE ROLE rate_limiter_planter LOGIN",
        "CREATE DATABASE rate_limiter_planted OWNER rate_limiter_planter",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let mut owner = connect_as("rate_limiter_planter", "rate_limiter_planted");
    owner
        .batch_execute(
            "CREATE EXTENSION rate_limiter;
             CREATE TABLE public.caught (who text);
             GRANT ALL ON public.caught TO PUBLIC;
             CREATE FUNCTION rate_limiter.planted_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO public.caught VALUES (current_user); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
             CREATE OPERATOR rate_limiter.= (LEFTARG = text, RIGHTARG = text, FUNCTION = rate_limiter.planted_eq);
             CREATE FUNCTION rate_limiter.lower(text) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO public.caught VALUES (current_user); RETURN $1; END $$;
             CREATE FUNCTION rate_limiter.texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO public.caught VALUES (current_user); RETURN true; END $$;",
        )
        .expect("the database owner plants objects in the extension's schema");
    let schema_owner: String = owner
        .query_one(
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'rate_limiter'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(schema_owner, "rate_limiter_planter");
    owner
        .batch_execute(
            "SELECT rate_limiter.define('planted', rate_limiter.token_bucket(10, '1 hour'));
             SELECT * FROM rate_limiter.rate_limit('planted', 'k');
             SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('planted', 'k', 1, NULL)]::rate_limiter.request[]);
             SELECT rate_limiter.rate_credit('planted', 'k', 1);
             SELECT rate_limiter.define('planted', rate_limiter.token_bucket(10, '1 minute'));
             SELECT rate_limiter.rate_reset('planted', 'k');
             SELECT rate_limiter.prune();
             SELECT rate_limiter.undefine('planted');",
        )
        .expect("the calls work");
    let caught: Vec<String> = owner
        .query("SELECT who FROM public.caught", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(caught.is_empty(), "planted objects ran as {caught:?}");
    drop(owner);
    for sql in [
        "DROP DATABASE rate_limiter_planted WITH (FORCE)",
        "DROP ROLE rate_limiter_planter",
    ] {
        admin.batch_execute(sql).unwrap();
    }
}
